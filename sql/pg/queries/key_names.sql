-- key_names on PostgreSQL (sql/queries/key_names.sql is the same answer on SQLite): the
-- JSON array of ids read by json_array_elements_text (SQLite: json_each).
SELECT id, name FROM keys
WHERE id IN (SELECT CAST(value AS BIGINT) FROM json_array_elements_text(CAST(:ids AS JSON)))
ORDER BY id;
