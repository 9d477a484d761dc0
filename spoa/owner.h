/* owner: which key made which stored response (the ids of the Responses API), so that
 * the gateway lets only that key read, cancel or delete it, or build on it: upstream,
 * every response is stored under the operator's one account.
 *
 * Filled by the intake thread from the rows of Responses creates (the id comes in
 * HAProxy's record, after the answer), and at start by the main thread from the
 * database (stored_responses); read by the I/O threads, under one mutex held for a
 * probe. Bounded: past max ids the oldest leaves the table; once it is full, an id it
 * lacks is looked up in the database (owner_set_store), by the thread that asks, on a
 * read-only connection of its own: a primary-key probe, and only on a miss, which a
 * table that never filled answers alone on SQLite. On PostgreSQL, which other nodes
 * share, every miss is probed (their creates are there), within a time budget per
 * thread (owner.c says why). A key's creates whose row has not come
 * yet are counted, so that a read of an id not known yet can wait for that row
 * (decision.h, DECISION_UNKNOWN_RESPONSE) instead of failing at once. */
#ifndef TALLY_OWNER_H
#define TALLY_OWNER_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"

struct db;

struct owner;

struct owner_entry {
	int64_t key_id;
	char model[ACCT_NAME_MAX];   /* the configured model the create was routed to */
	int64_t tokens;              /* the create's reported prompt + completion tokens: the
	                              * context a request building on it is billed again
	                              * (docs/limits.md); 0 when unknown */
};

/* max: ids kept at most (>= 1); memory grows with use, about 240 bytes an id. NULL on
 * ENOMEM. */
struct owner *owner_new(size_t max);
void owner_free(struct owner *o);     /* after every other thread stopped */

/* Notes that key_id made id (acct_response_id_ok) on model, reporting tokens. An id known already keeps its first
 * owner: returns 0; 1 when added; -1 if id is not one (or on ENOMEM). Any thread. */
int owner_put(struct owner *o, const char *id, int64_t key_id, const char *model,
              int64_t tokens);

/* Where owner_get looks up an id the full table lacks: the store at path, a SQLite
 * path or a PostgreSQL URL (copied; NULL: nowhere). Main thread, before the others
 * start. -1 if path is too long. */
int owner_set_store(struct owner *o, const char *path);

/* Who made id (len bytes): 1 and *out filled, or 0 when it is not known (nor in the
 * database when the table is full or the database is PostgreSQL, or if the database
 * cannot be read, or the thread's time for probes is spent). Any thread. */
int owner_get(struct owner *o, const char *id, size_t len, struct owner_entry *out);

/* A create of key_id was admitted (delta 1) or its row was made (-1). Counts never go
 * below 0: a row replayed from the journal after a restart had no admission here. */
void owner_creating(struct owner *o, int64_t key_id, int delta);

/* Whether key_id may have creates whose row has not come (keys share counters by hash,
 * so another key's may answer yes: the cost is a short wait, never a wrong owner).
 * Always yes on a shared store: another node's create may not be in it yet. */
int owner_creates_pending(struct owner *o, int64_t key_id);

size_t owner_count(struct owner *o);

/* How long a provider keeps a stored response (OpenAI: 30 days): older ones are not
 * loaded. */
#define OWNER_RETENTION_S (30 * 86400)

/* Puts the stored responses of db made since since_s (unix seconds), newest last, so
 * that the newest are kept when there are more than max. Main thread, before the
 * others start. 0, or -1 with err. */
int owner_load(struct owner *o, struct db *db, int64_t since_s, char *err, size_t errlen);

#endif
