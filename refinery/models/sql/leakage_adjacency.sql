-- The adjacency A of the sentence graph, both directions: A[u,w] = the number of pairs joining u and w
-- (a multigraph, as the reference code counts duplicate pairs), or 1 for a simple graph ($simple).
CREATE OR REPLACE TABLE adj AS
SELECT src, dst, CASE WHEN $simple THEN 1 ELSE count(*) END::BIGINT AS m
FROM (SELECT u AS src, v AS dst FROM pairs UNION ALL SELECT v, u FROM pairs)
GROUP BY src, dst
