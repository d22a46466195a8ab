-- AUDAC token–row index: distinct tokens of each row, lowercased, punctuation removed,
-- pooled over both texts, stopwords (table `stopwords`) removed when $remove_stopwords.
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
WHERE token <> ''
  AND NOT ($remove_stopwords AND token IN (SELECT word FROM stopwords));
