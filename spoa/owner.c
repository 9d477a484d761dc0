/* owner: stored responses and the keys that made them (see owner.h). Any thread; one
 * mutex over the table, atomics for the counts of creates in flight.
 *
 * The ids are kept in a ring of entries in order of arrival, chained from buckets by
 * FNV-1a of the id. The ids hashed come from the upstream's answers, never from a key
 * holder (one chooses only the ids it looks up, which walk the chains of ids that
 * exist), so a plain hash serves. The ring grows by doubling until max; then each new
 * id takes the oldest one's place, and misses go to the database: each thread that
 * asks holds its own read-only connection (a thread-specific value, closed when the
 * thread ends), as a store connection serves one thread at a time (db.h).
 *
 * A shared store (PostgreSQL: several nodes) holds the ids the other nodes' creates
 * made, which no table here learns: there every miss is asked of the store, and what
 * it finds is kept in the table. That probe is a round trip on the asking I/O thread,
 * and a key holder chooses the ids it asks for (each miss asked again up to eight
 * times, as another node's create may be on its way: owner_creates_pending): a flood
 * of made-up ids would make every request of the thread wait behind probes. Bound by
 * time, not by count: each thread spends at most PROBE_US of every second
 * probing (measured per probe, so the bound holds on a slow network as on loopback);
 * past it a miss is a miss until the budget refills. Neither a negative cache (fresh
 * ids defeat it, and an id another node is committing would stay missing) nor the
 * id's shape (made-up ids take any shape) bounds a flood; a per-key budget would
 * spare other keys the flood's 404s but needs the asking key, which the look-up does
 * not take. A store that failed is not asked again for a while (its ids are then not
 * found) rather than stall the thread on reconnects. */
#include "owner.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct.h"
#include "db.h"
#include "hash.h"
#include "log.h"
#include "probe.h"

#define OWNER_CREATING_SLOTS 1024
#define OWNER_PATH_MAX 4096
#define OWNER_RETRY_MS 5000
#define OWNER_WARN_MS 10000

/* A thread's read-only connection to the store, and its prepared lookup. */
struct owner_conn {
	struct db *db;                 /* NULL: not open (yet, or since it failed) */
	struct db_stmt *find;
	int64_t retry_at_ms;           /* after a failure, the store is left alone until */
	int64_t warned_at_ms;          /* last said that the budget ran out */
};

/* A stored response's tokens, from its create's row (r; NULL counts 0). */
#define OWNER_TOKENS_SQL "coalesce(r.prompt_tokens, 0) + coalesce(r.completion_tokens, 0)"

struct owner_slot {
	char id[ACCT_RESPONSE_ID_MAX];
	struct owner_entry e;
	uint32_t next;                 /* the bucket's next entry + 1; 0: none */
};

struct owner {
	pthread_mutex_t lock;
	struct owner_slot *slots;      /* the ring: [0, n) until full, then all of max */
	size_t cap, n, max;
	size_t oldest;                 /* once full: the slot the next id replaces */
	uint32_t *buckets;             /* entry index + 1; 0: empty */
	size_t nbuckets;               /* a power of two */
	atomic_int creating[OWNER_CREATING_SLOTS];
	char store[OWNER_PATH_MAX];    /* "": misses are misses */
	int shared;                    /* store is PostgreSQL: other nodes' ids are in it */
	pthread_key_t conn_key;        /* struct owner_conn * of the calling thread */
	int has_key;
};

static void owner_conn_close(void *p)
{
	struct owner_conn *c = p;

	if (!c)
		return;
	db_finalize(c->find);
	db_close(c->db);
	free(c);
}

struct owner *owner_new(size_t max)
{
	struct owner *o;

	if (max == 0 || max >= UINT32_MAX || !(o = calloc(1, sizeof(*o))))
		return NULL;
	o->max = max;
	for (o->nbuckets = 1; o->nbuckets < max; o->nbuckets <<= 1)
		;
	if (!(o->buckets = calloc(o->nbuckets, sizeof(*o->buckets)))) {
		free(o);
		return NULL;
	}
	pthread_mutex_init(&o->lock, NULL);
	return o;
}

void owner_free(struct owner *o)
{
	if (!o)
		return;
	if (o->has_key) {
		/* Other threads' connections closed as they ended; this one's is here. */
		owner_conn_close(pthread_getspecific(o->conn_key));
		pthread_key_delete(o->conn_key);
	}
	pthread_mutex_destroy(&o->lock);
	free(o->slots);
	free(o->buckets);
	free(o);
}

static size_t owner_bucket(const struct owner *o, const char *id, size_t len)
{
	return hash_fnv1a32(HASH_FNV32_BASIS, id, len) & (o->nbuckets - 1);
}

/* The slot holding id, or NULL. Under the lock. */
static struct owner_slot *owner_find(struct owner *o, const char *id, size_t len)
{
	uint32_t i = o->buckets[owner_bucket(o, id, len)];

	while (i) {
		struct owner_slot *s = &o->slots[i - 1];

		if (strlen(s->id) == len && memcmp(s->id, id, len) == 0)
			return s;
		i = s->next;
	}
	return NULL;
}

/* Takes slot i out of its bucket's chain. Under the lock. */
static void owner_unlink(struct owner *o, size_t i)
{
	struct owner_slot *s = &o->slots[i];
	uint32_t *link = &o->buckets[owner_bucket(o, s->id, strlen(s->id))];

	while (*link && *link != i + 1)
		link = &o->slots[*link - 1].next;
	if (*link)
		*link = s->next;
}

/* The slot a new id goes in: a fresh one while the ring grows, else the oldest's,
 * forgotten. SIZE_MAX on ENOMEM. Under the lock. */
static size_t owner_claim(struct owner *o)
{
	size_t i;

	if (o->n < o->max) {
		if (o->n == o->cap) {
			size_t cap = o->cap ? o->cap * 2 : 256;
			struct owner_slot *grown;

			cap = cap < o->max ? cap : o->max;
			if (!(grown = realloc(o->slots, cap * sizeof(*grown))))
				return SIZE_MAX;
			o->slots = grown;
			o->cap = cap;
		}
		return o->n++;
	}
	i = o->oldest;
	owner_unlink(o, i);
	o->oldest = (o->oldest + 1) % o->max;
	return i;
}

int owner_put(struct owner *o, const char *id, int64_t key_id, const char *model,
              int64_t tokens)
{
	size_t len = strlen(id), i, b;
	struct owner_slot *s;
	int rc = -1;

	if (!acct_response_id_ok(id, len))
		return -1;
	pthread_mutex_lock(&o->lock);
	if (owner_find(o, id, len)) {
		rc = 0;
		goto out;
	}
	if ((i = owner_claim(o)) == SIZE_MAX)
		goto out;
	s = &o->slots[i];
	memcpy(s->id, id, len + 1);
	s->e.key_id = key_id;
	strncpy(s->e.model, model, sizeof(s->e.model) - 1);
	s->e.model[sizeof(s->e.model) - 1] = '\0';
	s->e.tokens = tokens > 0 ? tokens : 0;
	b = owner_bucket(o, id, len);
	s->next = o->buckets[b];
	o->buckets[b] = (uint32_t)(i + 1);
	rc = 1;
out:
	pthread_mutex_unlock(&o->lock);
	return rc;
}

int owner_set_store(struct owner *o, const char *path)
{
	if (!path) {
		o->store[0] = '\0';
		o->shared = 0;
		return 0;
	}
	if (strlen(path) >= sizeof(o->store) ||
	    (!o->has_key && pthread_key_create(&o->conn_key, owner_conn_close) != 0))
		return -1;
	o->has_key = 1;
	memcpy(o->store, path, strlen(path) + 1);
	o->shared = db_is_postgres(path);
	return 0;
}

/* The calling thread's connection, allocated on first use (NULL on ENOMEM); its store
 * opened by owner_open. */
static struct owner_conn *owner_conn(struct owner *o)
{
	struct owner_conn *c = pthread_getspecific(o->conn_key);

	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return NULL;
		if (pthread_setspecific(o->conn_key, c) != 0) {
			free(c);
			return NULL;
		}
	}
	return c;
}

/* Opens c's store if it is not open: 0, or -1 (then left alone for OWNER_RETRY_MS). */
static int owner_open(struct owner *o, struct owner_conn *c)
{
	static const char sql[] =
		"SELECT s.key_id, s.model, " OWNER_TOKENS_SQL " FROM stored_responses s"
		" LEFT JOIN requests r ON r.request_id = s.request_id WHERE s.response_id = ?1";
	char err[256];

	if (c->db)
		return 0;
	if (db_open(o->store, DB_READONLY, &c->db, err, sizeof(err)) < 0 ||
	    db_prepare(c->db, sql, &c->find) < 0) {
		log_warn("stored responses: cannot read the store: %s (trying again in %d s)",
		         c->db ? db_errmsg(c->db) : err, OWNER_RETRY_MS / 1000);
		db_finalize(c->find);
		db_close(c->db);
		c->find = NULL;
		c->db = NULL;
		c->retry_at_ms = acct_now_ms() + OWNER_RETRY_MS;
		return -1;
	}
	return 0;
}

/* id in the store, for an id the table lacks. A store that fails is left alone for
 * OWNER_RETRY_MS: a reconnect waits on the network, and this is an I/O thread; so is
 * a thread whose time for probes is spent. That time counts the connect too, and a
 * store that hangs (a partition: libpq gives up within about 30 s) is paid back in
 * full before the next probe: the thread stays free at the price of cross-node reads
 * for 1000000 / PROBE_US times the stall. */
static int owner_get_stored(struct owner *o, const char *id, size_t len, struct owner_entry *out)
{
	struct owner_conn *c = owner_conn(o);
	const char *model;
	enum db_status rc;
	int64_t t0;
	int found = 0;

	if (!c || acct_now_ms() < c->retry_at_ms)
		return 0;
	t0 = probe_now_us();
	if (!probe_budget_allows(probe_thread_budget(), t0)) {
		if (acct_now_ms() - c->warned_at_ms >= OWNER_WARN_MS) {
			log_warn("stored responses: more ids to look up than %d ms a second of this "
			         "thread allows; ids this node did not see are not found meanwhile",
			         PROBE_US / 1000);
			c->warned_at_ms = acct_now_ms();
		}
		return 0;
	}
	if (owner_open(o, c) < 0)
		goto out;
	db_bind_text(c->find, 1, id, len);
	rc = db_step(c->find);
	if (rc == DB_ROW) {
		model = db_col_text(c->find, 1);
		out->key_id = db_col_int(c->find, 0);
		snprintf(out->model, sizeof(out->model), "%s", model ? model : "");
		out->tokens = db_col_int(c->find, 2);
		found = 1;
	} else if (rc != DB_DONE) {
		log_warn("stored responses: cannot read the store: %s (trying again in %d s)",
		         db_errmsg(c->db), OWNER_RETRY_MS / 1000);
		c->retry_at_ms = acct_now_ms() + OWNER_RETRY_MS;
	}
	db_reset(c->find);
out:
	probe_budget_spend(probe_thread_budget(), probe_now_us() - t0);
	return found;
}

int owner_get(struct owner *o, const char *id, size_t len, struct owner_entry *out)
{
	const struct owner_slot *s;
	int found = 0, full;
	char copy[ACCT_RESPONSE_ID_MAX];

	if (!acct_response_id_ok(id, len))
		return 0;
	pthread_mutex_lock(&o->lock);
	if ((s = owner_find(o, id, len))) {
		*out = s->e;
		found = 1;
	}
	full = o->n == o->max;
	pthread_mutex_unlock(&o->lock);
	if (found || !o->store[0] || !(full || o->shared))
		return found;
	if (!(found = owner_get_stored(o, id, len, out)) || !o->shared)
		return found;
	/* Another node's create: asked again (a chain's next step), it is known here. */
	memcpy(copy, id, len);
	copy[len] = '\0';
	owner_put(o, copy, out->key_id, out->model, out->tokens);
	return found;
}

static atomic_int *owner_counter(struct owner *o, int64_t key_id)
{
	return &o->creating[hash_fnv1a32(HASH_FNV32_BASIS, &key_id, sizeof(key_id)) %
	                    OWNER_CREATING_SLOTS];
}

void owner_creating(struct owner *o, int64_t key_id, int delta)
{
	atomic_int *c = owner_counter(o, key_id);
	int v = atomic_load(c);

	while (v + delta >= 0 && !atomic_compare_exchange_weak(c, &v, v + delta))
		;
}

int owner_creates_pending(struct owner *o, int64_t key_id)
{
	/* Other nodes' creates are not counted here: any may be on its way to the store
	 * (the writers commit in batches, a few ms after the answer). */
	return o->shared || atomic_load(owner_counter(o, key_id)) > 0;
}

int owner_load(struct owner *o, struct db *db, int64_t since_s, char *err, size_t errlen)
{
	/* Arrival order among equal times: SQLite's rowid; PostgreSQL's table has no such
	 * column, and the id orders them the same on every load. */
	const char *sql = db_kind(db) == DB_POSTGRES
		? "SELECT s.response_id, s.key_id, s.model, " OWNER_TOKENS_SQL " FROM stored_responses s"
		  " LEFT JOIN requests r ON r.request_id = s.request_id WHERE s.created_at >= ?1"
		  " ORDER BY s.created_at, s.response_id"
		: "SELECT s.response_id, s.key_id, s.model, " OWNER_TOKENS_SQL " FROM stored_responses s"
		  " LEFT JOIN requests r ON r.request_id = s.request_id WHERE s.created_at >= ?1"
		  " ORDER BY s.created_at, s.rowid";
	struct db_stmt *st = NULL;
	enum db_status rc;
	int ret = -1;

	/* streamed: a retention window of responses is held once, in the table, not
	 * twice while it loads */
	if (db_prepare_stream(db, sql, &st) < 0 || db_bind_int(st, 1, since_s) < 0) {
		snprintf(err, errlen, "loading stored responses: %s", db_errmsg(db));
		goto out;
	}
	while ((rc = db_step(st)) == DB_ROW) {
		const char *id = db_col_text(st, 0);
		const char *model = db_col_text(st, 2);

		if (id && owner_put(o, id, db_col_int(st, 1), model ? model : "", db_col_int(st, 3)) < 0 &&
		    acct_response_id_ok(id, strlen(id))) {
			snprintf(err, errlen, "loading stored responses: out of memory");
			goto out;
		}
	}
	if (rc != DB_DONE) {
		snprintf(err, errlen, "loading stored responses: %s", db_errmsg(db));
		goto out;
	}
	ret = 0;
out:
	db_finalize(st);
	return ret;
}

size_t owner_count(struct owner *o)
{
	size_t n;

	pthread_mutex_lock(&o->lock);
	n = o->n;
	pthread_mutex_unlock(&o->lock);
	return n;
}
