-- Deficits of the selected tokens S on the current corpus: D_l[s] = max_l' c_l'(s) − c_l(s),
-- D[s] = Σ_l D_l[s] (the minority-label rows still missing for a uniform p(l|s)). selected_rows carries each
-- row's label, so these queries never touch the corpus's rows.
WITH counts AS (
    SELECT t.token, t.label, sum(1 + coalesce(e.extra, 0))::BIGINT AS c
    FROM selected_rows t
    LEFT JOIN extra e USING (row_id)
    GROUP BY t.token, t.label
),
grid AS (
    SELECT s.token, ls.label, coalesce(c.c, 0) AS c
    FROM selected s CROSS JOIN label_set ls
    LEFT JOIN counts c ON c.token = s.token AND c.label = ls.label
)
SELECT token, label, c, max(c) OVER (PARTITION BY token) - c AS deficit
FROM grid
ORDER BY token, label;
