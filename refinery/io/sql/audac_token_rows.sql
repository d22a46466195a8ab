-- AUDAC token–row index: distinct tokens of each row, lowercased, punctuation removed,
-- pooled over both texts (stopwords too: the caller removes them once it has ranked every token).
CREATE OR REPLACE TABLE token_rows AS
WITH tokens AS (
    SELECT row_id,
           unnest(string_split_regex(
               trim(regexp_replace(lower(coalesce(text_a, '') || ' ' || coalesce(text_b, '')), '[^\w\s]|_', ' ', 'g')),
               '\s+')) AS token
    FROM rows
)
SELECT DISTINCT row_id, token
FROM tokens
WHERE token <> '';
