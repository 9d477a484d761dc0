-- key_names: the names of the keys whose ids are in :ids, a JSON array of integers, in
-- id order: summary's group=key rows, all of them with one query (a query each cost a
-- round trip per listed key on PostgreSQL).
SELECT id, name FROM keys WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;
