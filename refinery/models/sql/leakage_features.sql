-- The leakage features of every pair (Zhang et al. 2019 §2.2 and App. A.3; METHODS §4), in input order.
-- preferential attachment = deg(u)·deg(v); Jaccard = |N(u) ∩ N(v)| / |N(u) ∪ N(v)|.
SELECT p.row_id, p.split, p.label, p.u, p.v,
       nu.deg AS s1_freq,
       nv.deg AS s2_freq,
       coalesce(c.paths2, 0) AS s1s2_inter,
       coalesce(t.paths3, 0) AS s1s2_paths3,
       nu.hop2 AS s1_hop2,
       nv.hop2 AS s2_hop2,
       nu.hop3 AS s1_hop3,
       nv.hop3 AS s2_hop3,
       coalesce(c.ra, 0) AS resource_allocation,
       coalesce(c.common, 0) / (nu.nbrs + nv.nbrs - coalesce(c.common, 0)) AS jaccard,
       nu.deg * nv.deg AS preferential_attachment,
       coalesce(c.aa, 0) AS adamic_adar
FROM pairs p
JOIN nodes nu ON nu.node = p.u
JOIN nodes nv ON nv.node = p.v
LEFT JOIN pair_common c ON c.a = least(p.u, p.v) AND c.b = greatest(p.u, p.v)
LEFT JOIN pair_paths3 t ON t.a = least(p.u, p.v) AND t.b = greatest(p.u, p.v)
ORDER BY p.row_id
