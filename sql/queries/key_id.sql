-- key_id: a key's id by name (filters take names).
SELECT id FROM keys WHERE name = :name;
