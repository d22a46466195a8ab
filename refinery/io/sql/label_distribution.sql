-- Label counts and shares per shard and split.
SELECT split,
       shard,
       label,
       count(*)                                                            AS n,
       round(count(*) / sum(count(*)) OVER (PARTITION BY split, shard), 4) AS share
FROM corpus
GROUP BY split, shard, label
ORDER BY split, shard, label;
