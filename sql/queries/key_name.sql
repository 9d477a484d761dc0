-- key_name: a key's name by id (summary's group=key rows).
SELECT name FROM keys WHERE id = :id;
