-- Per distinct pair {a, b}: paths3 = (A³)[a,b] = Σ_x A[small,x]·(A²)[x,big], the 3-step walks between
-- the two sentences. The first step leaves the lower-degree end (pair_ends); each (A²)[x,big] needed is computed
-- once, again from its lower-degree end, so a hub is enumerated once rather than once per pair.
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
second_step AS MATERIALIZED (
    SELECT n.x, n.big, n.t, e.dst AS w, e.m FROM needed n JOIN adj e ON e.src = n.s
),
walks2 AS MATERIALIZED (
    SELECT s.x, s.big, sum(s.m * e.m) AS w2
    FROM second_step s JOIN adj e ON e.src = s.w AND e.dst = s.t
    GROUP BY s.x, s.big
)
SELECT f.a, f.b, sum(f.m * w.w2)::BIGINT AS paths3
FROM first_step f JOIN walks2 w ON w.x = f.x AND w.big = f.big
GROUP BY f.a, f.b
