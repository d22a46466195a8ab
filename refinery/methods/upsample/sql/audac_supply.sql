-- What is left to draw from, per selected token and label: the source rows B_l[s], those at the copy cap,
-- those refused (blocked: a copy would have strengthened a shortcut), and the copies made of them.
SELECT t.token, t.label,
       count(*)::BIGINT                                                        AS source_rows,
       count(*) FILTER (WHERE coalesce(e.extra, 0) >= $max_copies)::BIGINT     AS at_cap,
       count(*) FILTER (WHERE t.row_id IN (SELECT row_id FROM blocked))::BIGINT AS refused,
       coalesce(sum(e.extra), 0)::BIGINT                                       AS copies
FROM selected_rows t
LEFT JOIN extra e USING (row_id)
GROUP BY t.token, t.label
ORDER BY t.token, t.label;
