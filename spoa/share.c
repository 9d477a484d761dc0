/* share: the share thread (see share.h). Its own thread and connection; the main
 * thread only starts and stops it, metrics reads its counters (atomics).
 *
 * A round: quota_share_collect hands over the keys this node uses, with what they give
 * back (already taken from the node's grants); one transaction locks their pool rows
 * in key order (so that nodes never deadlock), refills and grants with lease_round on
 * the store's clock, writes the pools and this node's leases, and renews the node's
 * presence (limit_lease key 0); after the commit the grants reach quota. A failed
 * round gives the returns back to the node: nothing granted is lost or granted twice. */
#include "share.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct.h"
#include "db.h"
#include "lease.h"
#include "log.h"
#include "quota.h"
#include "spend.h"
#include "thread.h"

/* Leases expired this long ago are deleted, every SHARE_PURGE_EVERY rounds. */
#define SHARE_PURGE_MS    60000
#define SHARE_PURGE_EVERY 100
#define SHARE_NOW_MS      "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)"

enum share_stmt {
	SHARE_LOCK_POOL,
	SHARE_OTHERS,
	SHARE_SPENT,
	SHARE_TEAM_SPENT,
	SHARE_TAG_SPENT,
	SHARE_END_USER_SPENT,
	SHARE_KEY_MODEL_SPENT,
	SHARE_TEAM_MODEL_SPENT,
	SHARE_MODEL_NAMES,
	SHARE_WRITE,
	SHARE_PRESENCE,
	SHARE_PURGE,
	SHARE_ORPHAN,
	SHARE_NSTMT
};

/* Few round trips: a round is 3 statements per key and 3 more. */
static const char *const share_sql[SHARE_NSTMT] = {
	/* Creates the row if missing (full at its first refill) and locks it; an upsert
	 * reads the newest committed row, and its now is read once the lock is held. */
	[SHARE_LOCK_POOL] = "INSERT INTO limit_pool (key_id) VALUES (?1) ON CONFLICT (key_id)"
	                    " DO UPDATE SET key_id = excluded.key_id RETURNING rpm_cap, rpm_room,"
	                    " rpm_frac, rpm_at_ms, tpm_cap, tpm_room, tpm_frac, tpm_at_ms,"
	                    " budget_cap, budget_period, budget_start_ms, budget_room, "
	                    SHARE_NOW_MS,
	/* After the lock: every other node's lease written under it is visible. A lease
	 * expired less than hold_ms ago still counts: its node's HAProxy may stream on
	 * while its agent is stalled or dead, or the store was lost (?3 = now - hold). */
	[SHARE_OTHERS] = "SELECT coalesce(sum(slots), 0) FROM limit_lease"
	                 " WHERE key_id = ?1 AND node <> ?2 AND expires_ms > ?3",
	/* The seed spend.c gives one node: what the rollups hold for the period. */
	[SHARE_SPENT] = spend_key_sql,
	[SHARE_TEAM_SPENT] = spend_team_sql,
	[SHARE_TAG_SPENT] = spend_tag_sql,
	[SHARE_END_USER_SPENT] = spend_end_user_sql,
	[SHARE_KEY_MODEL_SPENT] = spend_key_model_sql,
	[SHARE_TEAM_MODEL_SPENT] = spend_team_model_sql,
	[SHARE_MODEL_NAMES] = spend_model_names_sql,
	[SHARE_WRITE] = "WITH pool AS (UPDATE limit_pool SET rpm_cap = ?6, rpm_room = ?7,"
	                " rpm_frac = ?8, rpm_at_ms = ?9, tpm_cap = ?10, tpm_room = ?11,"
	                " tpm_frac = ?12, tpm_at_ms = ?13, budget_cap = ?14, budget_period = ?15,"
	                " budget_start_ms = ?16, budget_room = ?17 WHERE key_id = ?1)"
	                " INSERT INTO limit_lease (key_id, node, slots, budget_held, expires_ms)"
	                " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key_id, node) DO UPDATE SET"
	                " slots = excluded.slots, budget_held = excluded.budget_held,"
	                " expires_ms = excluded.expires_ms",
	/* The node's presence (key 0) renewed, the nodes present counted (this one
	 * always), and the round's commit spared the WAL flush: a lost commit costs at
	 * most one round's grants, which the pools refill. */
	[SHARE_PRESENCE] = "WITH me AS (INSERT INTO limit_lease (key_id, node, expires_ms)"
	                   " VALUES (0, ?1, " SHARE_NOW_MS " + ?2) ON CONFLICT (key_id, node)"
	                   " DO UPDATE SET expires_ms = excluded.expires_ms)"
	                   " SELECT count(*) + 1, " SHARE_NOW_MS ","
	                   " set_config('synchronous_commit', 'off', true)"
	                   " FROM limit_lease WHERE key_id = 0 AND node <> ?1 AND expires_ms > "
	                   SHARE_NOW_MS,
	[SHARE_PURGE] = "DELETE FROM limit_lease WHERE expires_ms < ?1",
	/* At start: the slots of this node's previous agent (killed, restarted) may still
	 * stream in its HAProxy; renamed (a '/' no node name has), they count as another
	 * node's until their expiry and hold, and this agent starts from nothing. */
	[SHARE_ORPHAN] = "UPDATE limit_lease SET node = node || '/restarted-' || " SHARE_NOW_MS
	                 " WHERE node = ?1 AND key_id <> 0 AND slots > 0",
};

struct share {
	struct share_config c;
	struct db *db;
	struct db_stmt *st[SHARE_NSTMT];
	pthread_t thread;
	atomic_int stop;
	struct quota_share_key *keys;    /* the round's, reused */
	size_t keys_cap;
	struct lease_grant *grants;
	size_t grants_cap;
	int64_t nodes;                   /* at the last sync, >= 1 */
	int64_t last_ok_ms;              /* monotonic ms a committed round began */
	int64_t ok_since_ms;             /* ... the first since the last failure */
	int failing;                     /* logged */
	uint64_t rounds;
	_Atomic uint64_t syncs, failures, sync_us_sum;
	_Atomic int64_t last_sync_us, nodes_seen;
};

static int64_t share_mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* Runs st to its end with the bound parameters; 0, or -1. */
static int share_exec(struct db_stmt *st)
{
	enum db_status rc = db_step(st);

	db_reset(st);
	return rc == DB_DONE || rc == DB_ROW ? 0 : -1;
}

/* One integer of a one-row query with its parameters bound. */
static int share_int(struct db_stmt *st, int64_t *out)
{
	int rc = db_step(st) == DB_ROW ? 0 : -1;

	if (rc == 0)
		*out = db_col_int(st, 0);
	db_reset(st);
	return rc;
}

/* Reads a pool row under its lock, with the store's now. */
static int share_lock_pool(struct share *s, int64_t key_id, struct lease_pool *p, int64_t *now_ms)
{
	struct db_stmt *st = s->st[SHARE_LOCK_POOL];
	int rc = -1;

	db_bind_int(st, 1, key_id);
	if (db_step(st) == DB_ROW) {
		*p = (struct lease_pool){
			.rpm = { db_col_int(st, 0), db_col_int(st, 1), db_col_int(st, 2), db_col_int(st, 3) },
			.tpm = { db_col_int(st, 4), db_col_int(st, 5), db_col_int(st, 6), db_col_int(st, 7) },
			.budget_cap = db_col_int(st, 8),
			.budget_period = (int)db_col_int(st, 9),
			.budget_start_ms = db_col_int(st, 10),
			.budget_room = db_col_int(st, 11),
		};
		*now_ms = db_col_int(st, 12);
		rc = 0;
	}
	db_reset(st);
	return rc;
}

/* The pool row and this node's lease of the key, in one statement. */
static int share_write(struct share *s, int64_t key_id, const struct lease_pool *p,
                       int64_t slots, int64_t budget, int64_t expires_ms)
{
	struct db_stmt *st = s->st[SHARE_WRITE];
	const int64_t v[] = { slots, budget, expires_ms, p->rpm.cap, p->rpm.room, p->rpm.frac,
	                      p->rpm.at_ms, p->tpm.cap, p->tpm.room, p->tpm.frac, p->tpm.at_ms,
	                      p->budget_cap, p->budget_period, p->budget_start_ms, p->budget_room };
	enum db_status rc;
	int i;

	db_bind_int(st, 1, key_id);
	db_bind_text(st, 2, s->c.node, strlen(s->c.node));
	for (i = 0; i < (int)(sizeof(v) / sizeof(v[0])); i++)
		db_bind_int(st, i + 3, v[i]);
	rc = db_step(st);
	db_reset(st);
	return rc == DB_DONE ? 0 : -1;
}

/* One key of the round, under its pool row's lock. */
static int share_key(struct share *s, const struct quota_share_key *k, struct lease_grant *g)
{
	struct lease_pool p;
	struct lease_limits lim;
	int64_t now_ms, others = 0, spent = 0;
	struct db_stmt *st;

	if (share_lock_pool(s, k->key_id, &p, &now_ms) < 0)
		return -1;
	st = s->st[SHARE_OTHERS];
	db_bind_int(st, 1, k->key_id);
	db_bind_text(st, 2, s->c.node, strlen(s->c.node));
	db_bind_int(st, 3, now_ms - s->c.hold_ms);
	if (share_int(st, &others) < 0)
		return -1;
	lim = (struct lease_limits){ k->cfg.rpm, k->cfg.tpm, k->cfg.max_concurrent,
	                             k->cfg.budget_micros, (int)k->cfg.period,
	                             quota_period_start(k->cfg.period, k->cfg.tz, now_ms) };
	if (lease_budget_stale(&p, &lim)) {
		/* A pool is keyed by its subject: a key's, a team's, a tag budget's, a model
		 * budget's (summed over the models it covers) or an end user's (read by its
		 * key and id, as its subject's hash cannot be). */
		static const enum share_stmt spent_of[] = {
			[QUOTA_LEVEL_KEY] = SHARE_SPENT,
			[QUOTA_LEVEL_TEAM] = SHARE_TEAM_SPENT,
			[QUOTA_LEVEL_TAG] = SHARE_TAG_SPENT,
			[QUOTA_LEVEL_END_USER] = SHARE_END_USER_SPENT,
			[QUOTA_LEVEL_KEY_MODEL] = SHARE_KEY_MODEL_SPENT,
			[QUOTA_LEVEL_TEAM_MODEL] = SHARE_TEAM_MODEL_SPENT,
		};
		int64_t id;
		enum quota_level level = quota_subject_level(k->key_id, &id);

		st = s->st[spent_of[level]];
		if (level == QUOTA_LEVEL_KEY_MODEL || level == QUOTA_LEVEL_TEAM_MODEL) {
			if (spend_model_sum(s->st[SHARE_MODEL_NAMES], st, id, k->name,
			                    lim.period_start_ms / 1000, &spent) < 0)
				return -1;
		} else {
			db_bind_int(st, 1, level == QUOTA_LEVEL_END_USER ? k->owner : id);
			db_bind_int(st, 2, lim.period_start_ms / 1000);
			if (level == QUOTA_LEVEL_END_USER)
				db_bind_text(st, 3, k->name, strlen(k->name));
			if (share_int(st, &spent) < 0)
				return -1;
		}
	}
	lease_round(&p, &lim, &k->held, &k->ask, others, spent, now_ms, g);
	return share_write(s, k->key_id, &p, g->lease_slots,
	                   k->held.budget - k->ask.ret_budget + g->budget, now_ms + s->c.ttl_ms);
}

/* The transaction of a round over n keys: 0 committed, -1 rolled back. */
static int share_transaction(struct share *s, long n)
{
	struct db_stmt *st = s->st[SHARE_PRESENCE];
	int64_t nodes = 1, now_ms = 0;
	long i;

	if (db_begin(s->db) != DB_OK)
		goto fail;
	for (i = 0; i < n; i++)
		if (share_key(s, &s->keys[i], &s->grants[i]) < 0)
			goto fail;
	db_bind_text(st, 1, s->c.node, strlen(s->c.node));
	db_bind_int(st, 2, s->c.ttl_ms);
	if (db_step(st) != DB_ROW) {
		db_reset(st);
		goto fail;
	}
	nodes = db_col_int(st, 0);
	now_ms = db_col_int(st, 1);
	db_reset(st);
	if (++s->rounds % SHARE_PURGE_EVERY == 0) {
		db_bind_int(s->st[SHARE_PURGE], 1, now_ms - SHARE_PURGE_MS - s->c.hold_ms);
		if (share_exec(s->st[SHARE_PURGE]) < 0)
			goto fail;
	}
	if (db_commit(s->db) != DB_OK)
		goto fail;
	s->nodes = lease_nodes(s->nodes, nodes, share_mono_us() / 1000 - s->ok_since_ms, s->c.ttl_ms);
	return 0;
fail:
	db_rollback(s->db);
	return -1;
}

static void share_round(struct share *s)
{
	int64_t t0 = share_mono_us(), us;
	long n = quota_share_collect(s->c.quota, s->c.interval_ms, &s->keys, &s->keys_cap), i;
	const char *why = "out of memory";
	int ok = n >= 0;

	if (ok && (size_t)n > s->grants_cap) {
		struct lease_grant *g = realloc(s->grants, (size_t)n * sizeof(*g));

		if (g) {
			s->grants = g;
			s->grants_cap = (size_t)n;
		}
		ok = g != NULL;
	}
	if (ok && s->failing)
		s->ok_since_ms = t0 / 1000;
	if (ok && share_transaction(s, n) < 0) {
		why = db_errmsg(s->db);
		ok = 0;
	}
	for (i = 0; i < n; i++) {
		if (ok)
			quota_share_apply(s->c.quota, s->keys[i].key_id, &s->grants[i], acct_now_ms());
		else
			quota_share_restore(s->c.quota, &s->keys[i]);
	}
	quota_share_done(s->c.quota);
	us = share_mono_us() - t0;
	if (ok) {
		s->last_ok_ms = t0 / 1000;
		atomic_fetch_add(&s->syncs, 1);
		atomic_fetch_add(&s->sync_us_sum, (uint64_t)us);
		atomic_store(&s->last_sync_us, us);
		atomic_store(&s->nodes_seen, s->nodes);
		if (s->failing)
			log_info("limits: the store answers again; limits shared by %lld nodes",
			         (long long)s->nodes);
		s->failing = 0;
		quota_share_fallback(s->c.quota, 0);
		return;
	}
	atomic_fetch_add(&s->failures, 1);
	if (!s->failing)
		log_error("limits: cannot sync with the store: %s", why);
	s->failing = 1;
	if (share_mono_us() / 1000 - s->last_ok_ms >= s->c.ttl_ms &&
	    quota_share_fallback_nodes(s->c.quota) == 0) {
		log_error("limits: no sync for %lld ms: each limit counted here at 1/%lld of it"
		          " until the store answers", (long long)s->c.ttl_ms, (long long)s->nodes);
		quota_share_fallback(s->c.quota, s->nodes);
	}
}

static void *share_main(void *arg)
{
	struct share *s = arg;

	while (!atomic_load(&s->stop)) {
		share_round(s);
		quota_share_sleep(s->c.quota, s->c.interval_ms);
	}
	return NULL;
}

struct share *share_start(const struct share_config *c, char *err, size_t errlen)
{
	struct share *s = calloc(1, sizeof(*s));
	int i;

	if (!s) {
		snprintf(err, errlen, "share: out of memory");
		return NULL;
	}
	s->c = *c;
	s->nodes = 1;
	s->last_ok_ms = share_mono_us() / 1000;
	if (db_open(c->db_path, DB_READWRITE, &s->db, err, errlen) < 0)
		goto fail;
	for (i = 0; i < SHARE_NSTMT; i++) {
		if (db_prepare(s->db, share_sql[i], &s->st[i]) < 0) {
			snprintf(err, errlen, "share: %s", db_errmsg(s->db));
			goto fail;
		}
	}
	db_bind_text(s->st[SHARE_ORPHAN], 1, c->node, strlen(c->node));
	if (share_exec(s->st[SHARE_ORPHAN]) < 0)
		log_error("limits: the slots of this node's previous agent are not kept: %s",
		          db_errmsg(s->db));
	if (thread_start(&s->thread, "tally-share", share_main, s, err, errlen) < 0)
		goto fail;
	return s;
fail:
	for (i = 0; i < SHARE_NSTMT; i++)
		db_finalize(s->st[i]);
	db_close(s->db);
	free(s);
	return NULL;
}

void share_stop(struct share *s)
{
	int i;

	if (!s)
		return;
	atomic_store(&s->stop, 1);
	quota_share_wake(s->c.quota);
	pthread_join(s->thread, NULL);
	for (i = 0; i < SHARE_NSTMT; i++)
		db_finalize(s->st[i]);
	db_close(s->db);
	free(s->keys);
	free(s->grants);
	free(s);
}

void share_stats(struct share *s, struct share_stats *out)
{
	*out = (struct share_stats){
		.syncs = atomic_load(&s->syncs),
		.failures = atomic_load(&s->failures),
		.sync_us_sum = atomic_load(&s->sync_us_sum),
		.last_sync_us = atomic_load(&s->last_sync_us),
		.fallback_nodes = quota_share_fallback_nodes(s->c.quota),
		.nodes = atomic_load(&s->nodes_seen),
	};
	quota_share_waits(s->c.quota, &out->waits, &out->wait_timeouts);
}
