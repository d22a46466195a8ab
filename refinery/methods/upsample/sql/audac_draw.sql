-- One AUDAC turn for token $token: from each short label l, d_l = ceil(D_l[s] · $step) distinct rows of B[s]
-- (rows containing s with label l), those with the fewest copies first (ties in a seeded hash order),
-- never a row that already has $max_copies copies or that was refused (blocked).
WITH counts AS (
    SELECT t.label, sum(1 + coalesce(e.extra, 0))::BIGINT AS c
    FROM selected_rows t
    LEFT JOIN extra e USING (row_id)
    WHERE t.token = $token
    GROUP BY t.label
),
grid AS (
    SELECT ls.label, ls.p0, coalesce(c.c, 0) AS c FROM label_set ls LEFT JOIN counts c USING (label)
),
wanted AS (
    SELECT label, ceil(greatest(0, ceil(p0 * max(c / p0) OVER () - c - 1e-6)) * $step)::BIGINT AS d FROM grid
),
candidates AS (
    SELECT t.label, t.row_id,
           row_number() OVER (PARTITION BY t.label
                              ORDER BY coalesce(e.extra, 0), hash($seed, $round, $token, t.row_id), t.row_id) AS k
    FROM selected_rows t
    LEFT JOIN extra e USING (row_id)
    WHERE t.token = $token
      AND coalesce(e.extra, 0) < $max_copies
      AND t.row_id NOT IN (SELECT row_id FROM blocked)
)
SELECT c.label, c.row_id
FROM candidates c JOIN wanted w USING (label)
WHERE c.k <= w.d
ORDER BY c.label, c.k;
