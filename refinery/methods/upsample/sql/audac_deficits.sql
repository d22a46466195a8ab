-- Deficits of the selected tokens S on the current corpus, towards p(l|s) = p0_l (label_set):
-- D_l[s] = p0_l · max_l' (c_l'(s) / p0_l') − c_l(s), the rows of label l missing for p̂(l|s) to reach p0_l
-- by adding rows only (uniform p0: max_l' c_l'(s) − c_l(s), the paper's); D[s] = Σ_l D_l[s].
-- selected_rows carries each row's label, so these queries never touch the corpus's rows.
WITH counts AS (
    SELECT t.token, t.label, sum(1 + coalesce(e.extra, 0))::BIGINT AS c
    FROM selected_rows t
    LEFT JOIN extra e USING (row_id)
    GROUP BY t.token, t.label
),
grid AS (
    SELECT s.token, ls.label, ls.p0, coalesce(c.c, 0) AS c
    FROM selected s CROSS JOIN label_set ls
    LEFT JOIN counts c ON c.token = s.token AND c.label = ls.label
)
SELECT token, label, c,
       greatest(0, ceil(p0 * max(c / p0) OVER (PARTITION BY token) - c - 1e-6))::BIGINT AS deficit
FROM grid
ORDER BY token, label;
