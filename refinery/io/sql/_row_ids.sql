-- Content-hash row ids (ids.content_ids): the first 16 hex digits of
-- sha1("<file name>\x1f<line>\x1f<text_a>\x1f<text_b or None>\x1f<label>"), salted with the
-- file and line so duplicate rows stay distinct. $1: the file's base name.
SELECT substr(sha1(concat($1, chr(31), line::VARCHAR, chr(31), text_a, chr(31), coalesce(text_b, 'None'),
                          chr(31), label)), 1, 16) AS id
FROM rows
