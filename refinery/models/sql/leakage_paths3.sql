-- Per distinct pair {a, b}: paths3 = (A³)[a,b] = Σ_x A[small,x]·(A²)[x,big], the 3-step walks between
-- the two sentences. The first step leaves the lower-degree end (pair_ends). Each (A²)[x,big] needed,
-- Σ_w A[x,w]·A[w,big], is summed over its middle sentences w, each w taken the cheaper of two ways:
--   from the middle: every walk x–w–big with x among the needed x and big among the needed big, then the
--     needed (x, big) kept: |N(w) ∩ xs|·|N(w) ∩ bigs| walks for w (each w once, for every pair it serves);
--   walked: from the lower-degree end s of each needed (x, big) through w to the other end t: a walk for each
--     needed (x, big) whose s is a neighbour of w.
-- Where sentences recur (a premise in a hundred pairs, each hypothesis in ten), walking every needed (x, big)
-- from its end costs Σ min(deg x, deg big) over pairs of premises, billions of rows; from the middle, a
-- hypothesis of ten pairs serves its hundred pairs of premises at once. Neither way costs more than walking all.
-- MATERIALIZED keeps the planner from joining adj with itself before the pairs narrow it.
CREATE OR REPLACE TABLE pair_paths3 AS
WITH first_step AS MATERIALIZED (
    SELECT o.a, o.b, e.dst AS x, o.big, e.m FROM pair_ends o JOIN adj e ON e.src = o.small
),
needed AS MATERIALIZED (
    SELECT n.x, n.big,
           CASE WHEN nx.deg <= ny.deg THEN n.x ELSE n.big END AS s,
           CASE WHEN nx.deg <= ny.deg THEN n.big ELSE n.x END AS t
    FROM (SELECT DISTINCT x, big FROM first_step) n
    JOIN nodes nx ON nx.node = n.x JOIN nodes ny ON ny.node = n.big
),
walked_cost AS (   -- per w: the walks through it if every needed (x, big) were walked from its end s
    SELECT e.src AS w, sum(c.pairs) AS walks
    FROM (SELECT s, count(*) AS pairs FROM needed GROUP BY s) c JOIN adj e ON e.dst = c.s
    GROUP BY e.src
),
to_x AS MATERIALIZED (
    SELECT e.src AS w, e.dst AS x, e.m FROM adj e SEMI JOIN (SELECT DISTINCT x FROM needed) n ON n.x = e.dst
),
to_big AS MATERIALIZED (
    SELECT e.src AS w, e.dst AS big, e.m FROM adj e SEMI JOIN (SELECT DISTINCT big FROM needed) n ON n.big = e.dst
),
middles AS MATERIALIZED (   -- the w cheaper from the middle (a w next to no x or no big: none, nor walked)
    SELECT c.w FROM walked_cost c
    LEFT JOIN (SELECT w, count(*) AS k FROM to_x GROUP BY w) l USING (w)
    LEFT JOIN (SELECT w, count(*) AS k FROM to_big GROUP BY w) r USING (w)
    WHERE coalesce(l.k, 0) * coalesce(r.k, 0) <= c.walks
),
from_middles AS (
    SELECT l.x, r.big, sum(l.m * r.m) AS w2
    FROM (SELECT * FROM to_x SEMI JOIN middles USING (w)) l
    JOIN (SELECT * FROM to_big SEMI JOIN middles USING (w)) r ON r.w = l.w
    GROUP BY l.x, r.big
),
walked_step AS MATERIALIZED (
    SELECT n.x, n.big, n.t, e.dst AS w, e.m
    FROM needed n JOIN (SELECT * FROM adj ANTI JOIN middles m ON m.w = adj.dst) e ON e.src = n.s
),
walks2 AS MATERIALIZED (
    SELECT x, big, sum(w2) AS w2 FROM (
        SELECT m.x, m.big, m.w2 FROM from_middles m SEMI JOIN needed n ON n.x = m.x AND n.big = m.big
        UNION ALL
        SELECT s.x, s.big, s.m * e.m FROM walked_step s JOIN adj e ON e.src = s.w AND e.dst = s.t
    )
    GROUP BY x, big
)
SELECT f.a, f.b, sum(f.m * w.w2)::BIGINT AS paths3
FROM first_step f JOIN walks2 w ON w.x = f.x AND w.big = f.big
GROUP BY f.a, f.b
