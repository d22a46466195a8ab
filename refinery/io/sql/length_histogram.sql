-- Token-length histograms (whitespace tokens) of text_a and text_b per split and label, bins of 5.
WITH lengths AS (
    SELECT split, label, 'text_a' AS field, len(string_split(trim(text_a), ' ')) AS tokens FROM corpus
    UNION ALL
    SELECT split, label, 'text_b' AS field, len(string_split(trim(text_b), ' ')) AS tokens
    FROM corpus WHERE text_b IS NOT NULL
)
SELECT split, field, label,
       (tokens // 5) * 5      AS bin_start,
       (tokens // 5) * 5 + 4  AS bin_end,
       count(*)               AS n
FROM lengths
GROUP BY split, field, label, bin_start, bin_end
ORDER BY split, field, label, bin_start;
