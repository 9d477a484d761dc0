-- schema_version: for /api/health, which thereby also proves the database is readable.
PRAGMA user_version;
