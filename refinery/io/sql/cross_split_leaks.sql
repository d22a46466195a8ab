-- Rows of one split whose normalized pair also sits in another split (e.g. test rows in train).
WITH normalized AS (
    SELECT id, split, label,
           trim(regexp_replace(regexp_replace(lower(text_a), '[^a-z0-9 ]', ' ', 'g'), '\s+', ' ', 'g')) AS norm_a,
           trim(regexp_replace(regexp_replace(lower(coalesce(text_b, '')), '[^a-z0-9 ]', ' ', 'g'), '\s+', ' ', 'g')) AS norm_b
    FROM corpus
)
SELECT a.split        AS split,
       a.id           AS id,
       b.split        AS also_in,
       b.id           AS other_id,
       a.label        AS label,
       b.label        AS other_label,
       a.norm_a, a.norm_b
FROM normalized a
JOIN normalized b
  ON a.norm_a = b.norm_a AND a.norm_b = b.norm_b AND a.split <> b.split
ORDER BY a.split, a.id, b.split, b.id;
