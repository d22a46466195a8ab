-- Pairs as edges of the sentence graph (Zhang et al. 2019 §2.2; METHODS §4).
-- A node per distinct sentence: by its given id (node_a/node_b, e.g. QQP qid1/qid2) when $use_ids,
-- else by case- and whitespace-normalized text. With $per_split every split is a graph of its own
-- (inductive); otherwise one graph spans all splits (transductive, the paper's setting).
CREATE OR REPLACE TABLE pairs AS
WITH keyed AS (
    SELECT row_id, split, label,
           CASE WHEN $per_split THEN split ELSE '' END AS graph,
           coalesce(CASE WHEN $use_ids THEN 'id:' || node_a END,
                    'text:' || lower(regexp_replace(trim(text_a), '\s+', ' ', 'g'))) AS key_a,
           coalesce(CASE WHEN $use_ids THEN 'id:' || node_b END,
                    'text:' || lower(regexp_replace(trim(text_b), '\s+', ' ', 'g'))) AS key_b
    FROM rows
),
sentences AS (
    SELECT graph, key, (row_number() OVER (ORDER BY graph, key) - 1)::BIGINT AS node
    FROM (SELECT graph, key_a AS key FROM keyed UNION SELECT graph, key_b FROM keyed)
)
SELECT k.row_id, k.split, k.label, a.node AS u, b.node AS v
FROM keyed k
JOIN sentences a ON a.graph = k.graph AND a.key = k.key_a
JOIN sentences b ON b.graph = k.graph AND b.key = k.key_b
ORDER BY k.row_id
