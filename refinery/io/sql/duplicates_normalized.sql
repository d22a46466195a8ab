-- Duplicates after normalization (lowercase, punctuation stripped, whitespace collapsed).
WITH normalized AS (
    SELECT id, split, label,
           trim(regexp_replace(regexp_replace(lower(text_a), '[^a-z0-9 ]', ' ', 'g'), '\s+', ' ', 'g')) AS norm_a,
           trim(regexp_replace(regexp_replace(lower(coalesce(text_b, '')), '[^a-z0-9 ]', ' ', 'g'), '\s+', ' ', 'g')) AS norm_b
    FROM corpus
)
SELECT norm_a,
       norm_b,
       count(*)                            AS occurrences,
       count(DISTINCT split)               AS splits,
       list(DISTINCT split ORDER BY split) AS in_splits,
       count(DISTINCT label)               AS label_count,
       list(id ORDER BY id)                AS ids
FROM normalized
GROUP BY norm_a, norm_b
HAVING count(*) > 1
ORDER BY occurrences DESC, norm_a, norm_b;
