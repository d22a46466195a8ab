-- Per distinct pair {a, b}: paths3 = (A³)[a,b] = Σ_x A[small,x]·(A²)[x,big], the 3-step walks between
-- the two sentences. The first step leaves the lower-degree end (pair_ends). Each (A²)[x,big] needed,
-- Σ_w A[x,w]·A[w,big], is summed over its middle sentences w, each w taken the cheaper of two ways:
--   from the middle: every walk x–w–big with x among the needed x and big among the needed big, the needed
--     (x, big) kept: |N(w) ∩ xs|·|N(w) ∩ bigs| walks for w (each w once, for every pair it serves);
--   walked: from the lower-degree end s of each needed (x, big) through w to the other end t: a walk for each
--     needed (x, big) whose s is a neighbour of w.
-- Where sentences recur (a premise in a hundred pairs, each hypothesis in ten), walking every needed (x, big)
-- from its end costs Σ min(deg x, deg big) over pairs of premises, billions of rows; from the middle, a
-- hypothesis of ten pairs serves its hundred pairs of premises at once. Neither way costs more than walking all.
-- Each step is a table of its own, dropped at the end: DuckDB spills tables past its memory limit, where the
-- same steps as materialized CTEs of one query were held in memory together (out of memory at 11M pairs).
CREATE OR REPLACE TABLE paths3_first AS
SELECT o.a, o.b, e.dst AS x, o.big, e.m FROM pair_ends o JOIN adj e ON e.src = o.small;

CREATE OR REPLACE TABLE paths3_needed AS
SELECT n.x, n.big,
       CASE WHEN nx.deg <= ny.deg THEN n.x ELSE n.big END AS s,
       CASE WHEN nx.deg <= ny.deg THEN n.big ELSE n.x END AS t
FROM (SELECT DISTINCT x, big FROM paths3_first) n
JOIN nodes nx ON nx.node = n.x JOIN nodes ny ON ny.node = n.big;

-- the edges w → x and w → big that reach a needed end
CREATE OR REPLACE TABLE paths3_to_x AS
SELECT e.src AS w, e.dst AS x, e.m FROM adj e SEMI JOIN (SELECT DISTINCT x FROM paths3_needed) n ON n.x = e.dst;

CREATE OR REPLACE TABLE paths3_to_big AS
SELECT e.src AS w, e.dst AS big, e.m FROM adj e SEMI JOIN (SELECT DISTINCT big FROM paths3_needed) n ON n.big = e.dst;

-- the w cheaper walked than from the middle (few: a w next to no x or no big serves none, and is neither)
CREATE OR REPLACE TABLE paths3_walked AS
SELECT c.w
FROM (SELECT e.src AS w, sum(c.pairs) AS walks   -- the walks through w were every needed (x, big) walked
      FROM (SELECT s, count(*) AS pairs FROM paths3_needed GROUP BY s) c JOIN adj e ON e.dst = c.s
      GROUP BY e.src) c
JOIN (SELECT w, count(*) AS k FROM paths3_to_x GROUP BY w) l USING (w)
JOIN (SELECT w, count(*) AS k FROM paths3_to_big GROUP BY w) r USING (w)
WHERE l.k * r.k > c.walks;

-- (A²)[x, big] over the middles: every walk x–w–big of a w not walked, the needed (x, big) kept
CREATE OR REPLACE TABLE paths3_from_middles AS
SELECT l.x, r.big, sum(l.m * r.m) AS w2
FROM (SELECT * FROM paths3_to_x ANTI JOIN paths3_walked USING (w)) l
JOIN (SELECT * FROM paths3_to_big ANTI JOIN paths3_walked USING (w)) r ON r.w = l.w
SEMI JOIN paths3_needed n ON n.x = l.x AND n.big = r.big
GROUP BY l.x, r.big;

-- and over the walked: from each needed (x, big)'s end s through a walked w to its other end t
CREATE OR REPLACE TABLE paths3_walks2 AS
SELECT x, big, sum(w2) AS w2 FROM (
    SELECT x, big, w2 FROM paths3_from_middles
    UNION ALL
    SELECT n.x, n.big, s.m * e.m
    FROM paths3_needed n
    JOIN (SELECT * FROM adj SEMI JOIN paths3_walked m ON m.w = adj.dst) s ON s.src = n.s
    JOIN adj e ON e.src = s.dst AND e.dst = n.t
)
GROUP BY x, big;

CREATE OR REPLACE TABLE pair_paths3 AS
SELECT f.a, f.b, sum(f.m * w.w2)::BIGINT AS paths3
FROM paths3_first f JOIN paths3_walks2 w ON w.x = f.x AND w.big = f.big
GROUP BY f.a, f.b;

DROP TABLE paths3_first; DROP TABLE paths3_needed; DROP TABLE paths3_to_x; DROP TABLE paths3_to_big;
DROP TABLE paths3_walked; DROP TABLE paths3_from_middles; DROP TABLE paths3_walks2;
