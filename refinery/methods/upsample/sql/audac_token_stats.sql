-- Per token s and label l of the current corpus T (originals with multiplicity 1 + extra copies):
-- c_l(s), n(s), p̂(l|s) = c_l(s)/n(s), z*(s,l) = (p̂ − p0_l)/sqrt(p0_l(1−p0_l)/n), p0_l from label_set
-- (1/C under the uniform prior, the label's share of the input under the empirical one).
WITH weighted AS (
    SELECT t.token, r.label, 1 + coalesce(e.extra, 0) AS m
    FROM token_rows t
    JOIN rows r USING (row_id)
    LEFT JOIN extra e USING (row_id)
),
counts AS (
    SELECT token, label, sum(m)::BIGINT AS c FROM weighted GROUP BY token, label
),
grid AS (  -- every token × every label, zero where absent
    SELECT tk.token, ls.label, ls.p0, coalesce(c.c, 0) AS c
    FROM (SELECT DISTINCT token FROM counts) tk
    CROSS JOIN label_set ls
    LEFT JOIN counts c ON c.token = tk.token AND c.label = ls.label
)
SELECT token,
       label,
       c,
       sum(c) OVER w                                               AS n,
       c / sum(c) OVER w                                           AS p_hat,
       (c / sum(c) OVER w - p0) / sqrt(p0 * (1 - p0) / sum(c) OVER w) AS z
FROM grid
WINDOW w AS (PARTITION BY token)
ORDER BY token, label;
