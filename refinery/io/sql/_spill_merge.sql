-- One partition of the spill runs merged: (feature, label, count) summed over every run.
SELECT feature, label, sum(count)::BIGINT AS count
FROM read_parquet($files)
GROUP BY feature, label;
