-- Rows of a spill run with the partition of their key (bound: the number of partitions); every row of
-- a key lands in the same partition of every run, so runs merge one partition at a time.
SELECT *, (hash(feature) % $partitions)::INTEGER AS part
FROM run;
