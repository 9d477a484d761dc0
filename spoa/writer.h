/* writer: the one thread that stores usage rows in the store (SQLite or PostgreSQL,
 * db.h). It drains the queue in batches, one transaction each, keeping the requests
 * table, the rollups and this node's durable accounting counters consistent with each
 * other. writer_start and writer_stop
 * run on the main thread; see writer.c for the design.
 *
 * Counters (counters.h, where they are defined). The writer settles each committed
 * batch: rows inserted are written, rows whose request_id is stored already are
 * duplicates, rows it cannot store (the row broke a constraint, or the database failed
 * for retry_ms and the spill had no room) are dropped; spilled rows are neither until
 * stored. Every commit also stores the totals in this node's row of
 * the accounting table, so once the queue is drained that row shows received = written
 * + dropped (and so does the sum over every node's row). */
#ifndef TALLY_WRITER_H
#define TALLY_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "queue.h"

#define WRITER_BATCH_DEFAULT 8192
#define WRITER_BATCH_MAX     65536
#define WRITER_RETRY_DEFAULT 10000   /* ms */
#define WRITER_ROWS_DEFAULT  64      /* rows per INSERT statement (writer.c: measured) */
#define WRITER_ROWS_MAX      128     /* a power of two; libpq refuses to describe a
                                      * statement of over ~7500 parameters (writer.c) */
#define WRITER_NODE_DEFAULT  "local"

/* The writer's SQLite connection settings on top of db_open's (WAL, synchronous = NORMAL):
 * a 64 MiB page cache keeps the request_id index in memory; checkpoints every 16384
 * pages (64 MiB of WAL, truncated back to that size) copy each page rewritten by many
 * batches once instead of once per 1000 pages; CHECK constraints are skipped because
 * SQLite 3.40 builds two temporary tables per row for the IN lists on outcome and
 * usage_source, and the writer enforces the same rules itself (writer.c); temporary
 * storage in memory, because a multi-row INSERT ... ON CONFLICT keeps a statement
 * journal of the pages it changes (it may fail half way), which in a file cost 6 times
 * the database's own writes (285 000 pwrites against 46 000 for 100 000 rows). Exposed
 * for loadtest/bench-writer's baseline. */
#define WRITER_CONNECTION_SQL \
	"PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 16384;" \
	" PRAGMA journal_size_limit = 67108864; PRAGMA ignore_check_constraints = ON;" \
	" PRAGMA temp_store = MEMORY"

struct db;
struct spill;
struct writer;

struct writer_config {
	const char *db_path;          /* the store: a SQLite path or a postgresql:// URL, an
	                               * existing database at DB_SCHEMA_VERSION */
	const char *node;             /* this node's name, its accounting row; NULL or "":
	                               * WRITER_NODE_DEFAULT. On PostgreSQL a node is written
	                               * by one agent at a time (writer_start) */
	struct queue *queue;          /* borrowed: writer_stop closes it, the caller frees it */
	int batch_max;                /* rows per transaction, 1..WRITER_BATCH_MAX; 0: default */
	int retry_ms;                 /* a failing batch is retried this long, then its rows
	                               * are spilled (counted dropped if they cannot be);
	                               * 0: WRITER_RETRY_DEFAULT */
	int64_t max_db_pages;         /* cap on the database size in pages (PRAGMA
	                               * max_page_count): beyond it writes fail as a full
	                               * disk would; 0: no cap. SQLite only: ignored on
	                               * PostgreSQL, whose size the server manages */
	int rows_per_statement;       /* rows per multi-row INSERT, a power of two up to
	                               * WRITER_ROWS_MAX (1: one statement per row, for
	                               * measuring); 0: WRITER_ROWS_DEFAULT */
	/* Called on the writer thread after each batch, with the batch's rows: committed = 1
	 * once its transaction committed (each row is then stored, a duplicate, or counted
	 * dropped for breaking a constraint), 0 when it was given up (all counted dropped).
	 * rows lives for the call only. May be NULL. */
	void (*on_done)(void *arg, const struct acct_row *rows, size_t n, int committed);
	void *on_done_arg;
	/* Borrowed, may be NULL: where a given-up batch's rows wait for the store instead of
	 * being counted dropped, and whose rows the writer stores first once the store
	 * works again (on_done(committed = 1) then releases them). A spilled row is not
	 * passed to on_done when spilled. */
	struct spill *spill;
};

/* Opens its own connection to cfg->db_path (the main thread has created or migrated the
 * database first), creates the node's accounting row if missing and starts the thread.
 * On PostgreSQL it first takes a session advisory lock on the node name, held while
 * it runs (and taken again after a reconnect): a second agent with the same node name
 * is refused here rather than overwriting the first one's counters. Returns NULL with
 * a message in err. */
struct writer *writer_start(const struct writer_config *cfg, char *err, size_t errlen);

/* Closes the queue, lets the thread store everything still queued or spilled and a
 * final counter snapshot, joins it and frees w. Stop the producers first: rows they
 * push from now on are refused. If the database is failing, each batch gets retry_ms
 * until one is given up; from then on each remaining batch gets a single attempt, and
 * what is not stored is spilled: it stays in the journal for the next run. Main
 * thread. */
void writer_stop(struct writer *w);

/* Changes the database size cap (as max_db_pages; 0 removes it). Applied before the
 * writer's next transaction. Any thread. A cap below the current size acts as the
 * current size (SQLite never shrinks it). No effect on PostgreSQL. */
void writer_set_max_db_pages(struct writer *w, int64_t pages);

/* At start-up, before the intake and the writer run: continues the accounting counters
 * from node's accounting row (created with zeros if the node is new; NULL or "":
 * WRITER_NODE_DEFAULT), received reset to written + dropped there too
 * (counters_recover says why). db: a read-write connection of the caller. On
 * PostgreSQL a node whose writer runs in another agent is refused. Returns 0, or -1
 * with a message in err. */
int writer_load_counters(struct db *db, const char *node, char *err, size_t errlen);

#endif
