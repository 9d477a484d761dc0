/* usageview: keys' and teams' spend read from the store on demand (see usageview.h).
 * The I/O threads ask; each reads on a connection of its own. */
#include "usageview.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "hash.h"
#include "log.h"
#include "probe.h"
#include "quota.h"
#include "spend.h"

#define USAGEVIEW_PATH_MAX 4096
#define USAGEVIEW_RETRY_MS 5000
#define USAGEVIEW_WARN_MS 10000

/* A key's end users after an id, each whole (every day it has) and whether it has rows
 * since a day, at most USAGEVIEW_PAGE_SCAN of them: the table's order (key, end user,
 * day) lets a page read its end users' days in turn and stop at its end, and the bound
 * keeps a key whose end users had no rows in the period from making one page read them
 * all. */
static const char usageview_end_users_sql[] =
	"SELECT end_user, max(day) >= ?3,"
	" sum(CASE WHEN day >= ?3 THEN requests ELSE 0 END),"
	" sum(CASE WHEN day >= ?3 THEN cost_micros + estimated_cost_micros ELSE 0 END)"
	" FROM end_user_daily WHERE key_id = ?1 AND end_user > ?2"
	" GROUP BY end_user ORDER BY end_user LIMIT ?4";

/* A thread's read-only connection, and its lookups (a key's spend, a team's, a key's
 * end users, a key's and a team's budget per model). */
struct usageview_conn {
	struct db *db;                 /* NULL: not open (yet, or since it failed) */
	struct db_stmt *key, *team, *end_users, *key_model, *team_model, *model_names;
	int64_t retry_at_ms;           /* after a failure, the store is left alone until */
	int64_t warned_at_ms;          /* last said that the probe time ran out */
};

/* One figure; at_ms 0: none. */
struct usageview_slot {
	int64_t subject, since_ms, spent, at_ms;
};

struct usageview {
	pthread_mutex_t lock;          /* guards slots */
	struct usageview_slot slots[USAGEVIEW_SLOTS];
	char store[USAGEVIEW_PATH_MAX];
	pthread_key_t conn_key;        /* struct usageview_conn * of the calling thread */
	_Atomic uint64_t reads;
};

static void usageview_conn_close(void *p)
{
	struct usageview_conn *c = p;

	if (!c)
		return;
	db_finalize(c->key);
	db_finalize(c->team);
	db_finalize(c->end_users);
	db_finalize(c->key_model);
	db_finalize(c->team_model);
	db_finalize(c->model_names);
	db_close(c->db);
	free(c);
}

struct usageview *usageview_new(const char *store)
{
	struct usageview *u;

	if (strlen(store) >= USAGEVIEW_PATH_MAX || !(u = calloc(1, sizeof(*u))))
		return NULL;
	if (pthread_key_create(&u->conn_key, usageview_conn_close) != 0) {
		free(u);
		return NULL;
	}
	memcpy(u->store, store, strlen(store) + 1);
	pthread_mutex_init(&u->lock, NULL);
	return u;
}

void usageview_free(struct usageview *u)
{
	if (!u)
		return;
	/* Other threads' connections closed as they ended; this one's is here. */
	usageview_conn_close(pthread_getspecific(u->conn_key));
	pthread_key_delete(u->conn_key);
	pthread_mutex_destroy(&u->lock);
	free(u);
}

uint64_t usageview_reads(struct usageview *u)
{
	return atomic_load(&u->reads);
}

static struct usageview_slot *usageview_slot_of(struct usageview *u, int64_t subject)
{
	return &u->slots[hash_fnv1a32(HASH_FNV32_BASIS, &subject, sizeof(subject)) % USAGEVIEW_SLOTS];
}

/* Closes c's store after a failure at now_ms: it is left alone until USAGEVIEW_RETRY_MS
 * later, then opened again (a lost PostgreSQL connection does not come back by itself). */
static void usageview_conn_fail(struct usageview_conn *c, const char *why, int64_t now_ms)
{
	log_warn("usage: cannot read the store: %s (trying again in %d s)", why,
	         USAGEVIEW_RETRY_MS / 1000);
	db_finalize(c->key);
	db_finalize(c->team);
	db_finalize(c->end_users);
	db_finalize(c->key_model);
	db_finalize(c->team_model);
	db_finalize(c->model_names);
	db_close(c->db);
	c->key = c->team = c->end_users = c->key_model = c->team_model = c->model_names = NULL;
	c->db = NULL;
	c->retry_at_ms = now_ms + USAGEVIEW_RETRY_MS;
}

/* The calling thread's connection state, allocated on first use; NULL on ENOMEM. */
static struct usageview_conn *usageview_conn(struct usageview *u)
{
	struct usageview_conn *c = pthread_getspecific(u->conn_key);

	if (!c) {
		if (!(c = calloc(1, sizeof(*c))))
			return NULL;
		if (pthread_setspecific(u->conn_key, c) != 0) {
			free(c);
			return NULL;
		}
	}
	return c;
}

/* Opens c's store if it is not open: 0, or -1 (then left alone for USAGEVIEW_RETRY_MS
 * from now_ms). */
static int usageview_open(struct usageview *u, struct usageview_conn *c, int64_t now_ms)
{
	char err[256];

	if (c->db)
		return 0;
	if (db_open(u->store, DB_READONLY, &c->db, err, sizeof(err)) < 0 ||
	    db_prepare(c->db, spend_key_sql, &c->key) < 0 ||
	    db_prepare(c->db, spend_team_sql, &c->team) < 0) {
		usageview_conn_fail(c, c->db ? db_errmsg(c->db) : err, now_ms);
		return -1;
	}
	return 0;
}

/* The calling thread's connection, open, when it may read at t0 (probe_now_us): its
 * probe time not spent and its store not failed lately; else NULL. A read asked for is
 * charged to the probe time whole, connect included (usageview_done): a store that
 * hangs (a partition; libpq gives up after 10 s) is paid back before the thread reads
 * again, and its retry counts from when it failed. */
static struct usageview_conn *usageview_begin(struct usageview *u, int64_t now_ms, int64_t t0)
{
	struct usageview_conn *c = usageview_conn(u);

	if (!c || now_ms < c->retry_at_ms)
		return NULL;
	if (!probe_budget_allows(probe_thread_budget(), t0)) {
		if (now_ms - c->warned_at_ms >= USAGEVIEW_WARN_MS) {
			log_warn("usage: more store reads asked than %d ms a second of this thread"
			         " allows; answering 503 meanwhile", PROBE_US / 1000);
			c->warned_at_ms = now_ms;
		}
		return NULL;
	}
	if (usageview_open(u, c, now_ms + (probe_now_us() - t0) / 1000) < 0) {
		probe_budget_spend(probe_thread_budget(), probe_now_us() - t0);
		return NULL;
	}
	return c;
}

/* Ends a read begun at t0 on c: a failed one (rc < 0) closes the store. */
static void usageview_done(struct usageview *u, struct usageview_conn *c, int rc,
                           int64_t now_ms, int64_t t0)
{
	if (rc < 0)
		usageview_conn_fail(c, db_errmsg(c->db), now_ms + (probe_now_us() - t0) / 1000);
	atomic_fetch_add(&u->reads, 1);
	probe_budget_spend(probe_thread_budget(), probe_now_us() - t0);
}

/* Reads subject's spend since since_ms on the calling thread's connection: 0, or -1. */
static int usageview_read(struct usageview *u, int64_t subject, const char *model,
                          int64_t since_ms, int64_t now_ms, int64_t *spent)
{
	int64_t t0, id;
	enum quota_level level = quota_subject_level(subject, &id);
	int by_model = level == QUOTA_LEVEL_KEY_MODEL || level == QUOTA_LEVEL_TEAM_MODEL;
	struct usageview_conn *c;
	struct db_stmt **st;
	int rc = -1;

	/* Nothing else has a figure here: not the store's failure. */
	if ((by_model && !model) || (!by_model && level != QUOTA_LEVEL_KEY && level != QUOTA_LEVEL_TEAM))
		return -1;
	t0 = probe_now_us();
	if (!(c = usageview_begin(u, now_ms, t0)))
		return -1;
	st = level == QUOTA_LEVEL_KEY ? &c->key : level == QUOTA_LEVEL_TEAM ? &c->team
	   : level == QUOTA_LEVEL_KEY_MODEL ? &c->key_model : &c->team_model;
	/* Budgets per model are prepared on first use, as a page of end users is. */
	if (by_model &&
	    ((!*st && db_prepare(c->db, level == QUOTA_LEVEL_KEY_MODEL ? spend_key_model_sql
	                                                               : spend_team_model_sql, st) < 0) ||
	     (!c->model_names && db_prepare(c->db, spend_model_names_sql, &c->model_names) < 0)))
		goto out;
	if (by_model) {
		rc = spend_model_sum(c->model_names, *st, id, model, since_ms / 1000, spent);
	} else {
		db_bind_int(*st, 1, id);
		db_bind_int(*st, 2, since_ms / 1000);
		if (db_step(*st) == DB_ROW) {
			*spent = db_col_int(*st, 0);
			rc = 0;
		}
		db_reset(*st);
	}
out:
	usageview_done(u, c, rc, now_ms, t0);
	return rc;
}

int usageview_end_users(struct usageview *u, int64_t key_id, int64_t since_ms,
                        const char *after, int64_t now_ms, struct usageview_end_user *out,
                        int n, char *stopped_at)
{
	char last[ACCT_END_USER_MAX] = "";
	int examined = 0;
	int64_t t0 = probe_now_us();
	struct usageview_conn *c = usageview_begin(u, now_ms, t0);
	enum db_status rc = DB_ERROR;
	struct db_stmt *st;
	int got = 0;

	if (!c)
		return -1;
	/* Prepared on first use: a connection that serves only spend lookups pays nothing
	 * for it, and its connect stays within the first read's probe time. */
	if (!c->end_users && db_prepare(c->db, usageview_end_users_sql, &c->end_users) < 0) {
		usageview_done(u, c, -1, now_ms, t0);
		return -1;
	}
	st = c->end_users;
	stopped_at[0] = '\0';
	if (db_bind_int(st, 1, key_id) == 0 && db_bind_text(st, 2, after, strlen(after)) == 0 &&
	    db_bind_int(st, 3, since_ms / 1000) == 0 &&
	    db_bind_int(st, 4, USAGEVIEW_PAGE_SCAN) == 0) {
		while (got < n && (rc = db_step(st)) == DB_ROW) {
			const char *id = db_col_text(st, 0);

			examined++;
			snprintf(last, sizeof(last), "%s", id ? id : "");
			if (!db_col_int(st, 1))
				continue;
			memcpy(out[got].id, last, sizeof(last));
			out[got].requests = db_col_int(st, 2);
			out[got].spent = db_col_int(st, 3);
			got++;
		}
		if (got < n && rc == DB_DONE && examined == USAGEVIEW_PAGE_SCAN)
			memcpy(stopped_at, last, sizeof(last));
	}
	db_reset(st);
	usageview_done(u, c, rc == DB_DONE || rc == DB_ROW ? 0 : -1, now_ms, t0);
	return rc == DB_DONE || rc == DB_ROW ? got : -1;
}

int usageview_spent(struct usageview *u, int64_t subject, const char *model, int64_t since_ms,
                    int64_t now_ms, int64_t *spent, int64_t *as_of_ms)
{
	struct usageview_slot *s = usageview_slot_of(u, subject);
	int found;

	pthread_mutex_lock(&u->lock);
	found = s->at_ms && s->subject == subject && s->since_ms == since_ms &&
	        now_ms - s->at_ms < USAGEVIEW_FRESH_MS && now_ms >= s->at_ms;
	if (found) {
		*spent = s->spent;
		*as_of_ms = s->at_ms;
	}
	pthread_mutex_unlock(&u->lock);
	if (found)
		return 0;
	if (usageview_read(u, subject, model, since_ms, now_ms, spent) < 0)
		return -1;
	*as_of_ms = now_ms;
	pthread_mutex_lock(&u->lock);
	*s = (struct usageview_slot){ subject, since_ms, *spent, now_ms };
	pthread_mutex_unlock(&u->lock);
	return 0;
}
