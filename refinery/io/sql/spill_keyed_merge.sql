-- One partition of keyed spill runs (FeatureCounts.spill) merged: counts summed per table code, token
-- ids and label id, in feature order (a feature's labels adjacent).
SELECT code, first, second, label, sum(count)::BIGINT AS count
FROM read_parquet($files)
GROUP BY code, first, second, label
ORDER BY code, first, second, label;
