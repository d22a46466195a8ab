-- One AUDAC draw for token $token: from each deficit label l, d_l = ceil(D_l[s] · $step) rows of B[s]
-- (rows containing s with label l), sampled with replacement by a seeded hash.
WITH counts AS (
    SELECT t.label, sum(1 + coalesce(e.extra, 0))::BIGINT AS c
    FROM selected_rows t
    LEFT JOIN extra e USING (row_id)
    WHERE t.token = $token
    GROUP BY t.label
),
grid AS (
    SELECT ls.label, coalesce(c.c, 0) AS c FROM label_set ls LEFT JOIN counts c USING (label)
),
wanted AS (
    SELECT label, ceil((max(c) OVER () - c) * $step)::BIGINT AS d FROM grid
),
candidates AS (
    SELECT label, row_id,
           row_number() OVER (PARTITION BY label ORDER BY row_id) - 1 AS k,
           count(*) OVER (PARTITION BY label)                          AS m
    FROM selected_rows
    WHERE token = $token
),
draws AS (
    SELECT label, unnest(range(d)) AS i FROM wanted WHERE d > 0
),
picks AS (
    SELECT d.label, d.i, hash($seed, $round, $token, d.label, d.i) % any_value(c.m) AS k
    FROM draws d JOIN candidates c USING (label)
    GROUP BY d.label, d.i
)
SELECT p.label, p.i AS draw, c.row_id
FROM picks p JOIN candidates c ON c.label = p.label AND c.k = p.k
ORDER BY p.label, p.i;
