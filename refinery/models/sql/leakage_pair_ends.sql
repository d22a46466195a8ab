-- Every distinct pair {a, b} (a ≤ b) with its lower-degree end ``small`` and the other end ``big``:
-- the walks of leakage_common and leakage_paths3 start from ``small``, so each pair costs
-- min(deg a, deg b) rather than the degree of a hub.
CREATE OR REPLACE TABLE pair_ends AS
SELECT q.a, q.b,
       CASE WHEN na.deg <= nb.deg THEN q.a ELSE q.b END AS small,
       CASE WHEN na.deg <= nb.deg THEN q.b ELSE q.a END AS big
FROM (SELECT DISTINCT least(u, v) AS a, greatest(u, v) AS b FROM pairs) q
JOIN nodes na ON na.node = q.a
JOIN nodes nb ON nb.node = q.b
