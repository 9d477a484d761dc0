"""A SQLite database's rows copied into a PostgreSQL database on sql/pg/schema.sql, ids
included: the same store on the other engine, for the suites that check queryd's answers
on both (test_queryd.py, test_dashboard.py) against expectations computed once."""
import sqlite3

import psycopg2
import psycopg2.extras

from conftest import ROOT, SCHEMA


def pg_store(pg, name, db):
    """A PostgreSQL database on sql/pg/schema.sql holding every row of the SQLite
    database db, ids included (meta aside: the schema's own), analyzed. Its URL."""
    url = pg.create_db(name)
    src = sqlite3.connect(db)
    dst = psycopg2.connect(url)
    try:
        with dst, dst.cursor() as cur:
            cur.execute((ROOT / "sql" / "pg" / "schema.sql").read_text())
            cur.execute("INSERT INTO meta (name, value) VALUES ('schema_version', %s)"
                        " ON CONFLICT (name) DO NOTHING", (SCHEMA,))
            tables = [t for (t,) in src.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'meta'"
                " AND name NOT LIKE 'sqlite_%' AND name <> 'request_tags'"
                " ORDER BY rowid")]   # creation order: FKs; requests' trigger fills request_tags
            for t in tables:
                cols = [c[1] for c in src.execute(f"PRAGMA table_info({t})")]
                rows = src.execute(f"SELECT {', '.join(cols)} FROM {t}").fetchall()
                if rows:
                    psycopg2.extras.execute_values(
                        cur, f"INSERT INTO {t} ({', '.join(cols)}) VALUES %s", rows)
            cur.execute("ANALYZE")
    finally:
        dst.close()
        src.close()
    return url
