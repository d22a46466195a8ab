-- Per node u (paper App. A.3): deg(u) = Σ_x A[u,x] (S1_freq/S2_freq), |N(u)| distinct neighbours,
--   hop2(u) = Σ_x A[u,x]·(deg(x) − A[x,u])                        2-step walks that never step back,
--   hop3(u) = Σ_x A[u,x]·(hop2(x) − A[x,u]·(deg(u) − A[u,x]))      non-backtracking 3-step walks;
-- on a locally tree-like graph these are the numbers of 2-hop and 3-hop neighbours, in O(|E|).
CREATE OR REPLACE TABLE nodes AS
WITH degree AS (
    SELECT src AS node, sum(m)::BIGINT AS deg, count(*)::BIGINT AS nbrs FROM adj GROUP BY src
),
hop2 AS (
    SELECT a.src AS node, sum(a.m * (x.deg - a.m))::BIGINT AS hop2
    FROM adj a JOIN degree x ON x.node = a.dst
    GROUP BY a.src
),
hop3 AS (
    SELECT a.src AS node, sum(a.m * (x.hop2 - a.m * (u.deg - a.m)))::BIGINT AS hop3
    FROM adj a JOIN hop2 x ON x.node = a.dst JOIN degree u ON u.node = a.src
    GROUP BY a.src
)
SELECT node, deg, nbrs, hop2, hop3
FROM degree JOIN hop2 USING (node) JOIN hop3 USING (node)
ORDER BY node
