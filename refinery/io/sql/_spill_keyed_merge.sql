-- One partition of keyed spill runs (FeatureCounts.spill) merged: counts summed per table code, token
-- ids and label id, in feature order (a feature's labels adjacent). A partition merged before holds its counts
-- as BIGINT, a run as INTEGER: union_by_name reads both as BIGINT.
SELECT code, first, second, label, sum(count)::BIGINT AS count
FROM read_parquet($files, union_by_name = true)
GROUP BY code, first, second, label
ORDER BY code, first, second, label;
