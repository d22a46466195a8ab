-- AUDAC token–row index: distinct tokens of each row, lowercased, punctuation removed, a word's n't a token of
-- its own ("don't" → "do", "n't", as core.features' tokenizer splits it), pooled over both texts (stopwords too:
-- the caller removes them once it has ranked every token).
CREATE OR REPLACE TABLE token_rows AS
WITH tokens AS (
    SELECT row_id,
           unnest(string_split_regex(
               trim(regexp_replace(
                   regexp_replace(lower(coalesce(text_a, '') || ' ' || coalesce(text_b, '')),
                                  'n[''’]t\b', ' nxxnotxxt ', 'g'),   -- letters only: kept through the next step
                   '[^\w\s]|_', ' ', 'g')),
               '\s+')) AS token
    FROM rows
)
SELECT DISTINCT row_id, CASE token WHEN 'nxxnotxxt' THEN 'n''t' ELSE token END AS token
FROM tokens
WHERE token <> '';
