-- Per distinct pair {a, b}, over the common neighbours w ∈ N(a) ∩ N(b):
--   paths2 = Σ_w A[a,w]·A[w,b] = (A²)[a,b]   S1S2_inter, the 2-hop paths
--   common = |N(a) ∩ N(b)|                   (Jaccard's numerator)
--   ra     = Σ_w 1 / deg(w)                  resource allocation
--   aa     = Σ_w 1 / ln deg(w)               Adamic–Adar (deg(w) > 1)
-- Each pair steps from its lower-degree end only (pair_ends; Σ min(deg a, deg b) rows), then looks the
-- second edge up by both ends; MATERIALIZED keeps the planner from joining adj with itself first.
CREATE OR REPLACE TABLE pair_common AS
WITH first_step AS MATERIALIZED (
    SELECT o.a, o.b, e.dst AS w, o.big, e.m FROM pair_ends o JOIN adj e ON e.src = o.small
)
SELECT f.a, f.b,
       sum(f.m * e.m)::BIGINT AS paths2,
       count(*)::BIGINT AS common,
       sum(1.0 / n.deg) AS ra,
       sum(CASE WHEN n.deg > 1 THEN 1.0 / ln(n.deg) ELSE 0 END) AS aa
FROM first_step f
JOIN adj e ON e.src = f.w AND e.dst = f.big
JOIN nodes n ON n.node = f.w
GROUP BY f.a, f.b
