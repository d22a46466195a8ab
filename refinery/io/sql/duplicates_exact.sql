-- Pairs whose exact (text_a, text_b) occurs more than once, within or across splits;
-- label_count > 1 flags the same pair with conflicting labels.
SELECT text_a,
       text_b,
       count(*)                        AS occurrences,
       count(DISTINCT split)           AS splits,
       list(DISTINCT split ORDER BY split) AS in_splits,
       count(DISTINCT label)           AS label_count,
       list(id ORDER BY id)            AS ids
FROM corpus
GROUP BY text_a, text_b
HAVING count(*) > 1
ORDER BY occurrences DESC, text_a, text_b;
