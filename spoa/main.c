/* tally-agent main thread: configuration, database, journal recovery, listeners,
 * accepting connections and handing them to the I/O threads, noticing key and model
 * changes, metrics and the control socket, signals; or, with --self-check, only the
 * checks of selfcheck.c, and no start.
 *
 * Threads: the I/O threads decide (worker.c); the intake thread turns HAProxy's records
 * into rows (intake.c); the writer thread stores them (writer.c); the reload thread
 * watches for key and model changes (reload.c), on the main connection, which the main
 * thread leaves to it once started; on PostgreSQL the share thread leases the keys'
 * limits shared with the other nodes (share.c). Shutdown stops reload, then the others
 * in that order, so that every row built reaches the store before exit. */
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acct.h"
#include "config.h"
#include "control.h"
#include "counters.h"
#include "db.h"
#include "gwsecret.h"
#include "intake.h"
#include "journal.h"
#include "keyhash.h"
#include "keylive.h"
#include "longbody.h"
#include "keytable.h"
#include "live-t.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "owner.h"
#include "pending.h"
#include "queue.h"
#include "quota.h"
#include "recovery.h"
#include "reload.h"
#include "selfcheck.h"
#include "share.h"
#include "spill.h"
#include "spend.h"
#include "teamspend.h"
#include "usageview.h"
#include "stats.h"
#include "worker.h"
#include "writer.h"

struct agent {
	struct agent_config cfg;
	struct db *db;
	unsigned char secret[KEYHASH_SECRET_LEN];
	struct gwsecret gateway_secret;
	int64_t generation;
	int64_t backlog_from_ms;          /* see intake_config */
	struct worker *workers[CONFIG_MAX_THREADS];
	int nworkers;
	int next_worker;
	ev_io listeners[CONFIG_MAX_LISTEN];
	int nlisteners;
	ev_timer accept_pause;       /* out of file descriptors: listeners rest a moment */
	ev_timer journal_tick;
	ev_signal sigint, sigterm;
	struct queue *queue;
	struct pending *pending;
	struct keylive *keylive;
	struct quota *quota;
	struct longbody *longbody;
	struct owner *owners;
	struct usageview *usage;
	struct keytable *kt;              /* the first snapshot's reference for the reload
	                                   * thread, until it starts; NULL: none */
	struct decision_policy policy; /* the workers' defaults, from cfg */
	struct journal *journal;
	struct journal_log *jlog;    /* the main thread's, for recovered entries */
	struct spill *spill;         /* rows waiting on disk for the store */
	struct writer *writer;
	struct intake *intake;
	struct reload *reload;
	struct share *share;              /* limits shared across nodes (PostgreSQL) */
	struct teamspend *teams;          /* the teams' spend for the metrics; NULL: none */
	struct metrics *metrics;
	struct control *control;
	struct live_view live;
};

static void agent_listeners_set(struct agent *a, struct ev_loop *loop, int on)
{
	int i;

	for (i = 0; i < a->nlisteners; i++) {
		if (on)
			ev_io_start(loop, &a->listeners[i]);
		else
			ev_io_stop(loop, &a->listeners[i]);
	}
}

static void agent_on_accept_resume(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)revents;
	agent_listeners_set(t->data, loop, 1);
}

static void agent_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct agent *a = io->data;
	int fd;

	(void)revents;
	while ((fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct worker *w = a->workers[a->next_worker];

		a->next_worker = (a->next_worker + 1) % a->nworkers;
		if (worker_post_conn(w, fd) < 0)
			close(fd);
	}
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
		/* The pending connection stays queued and would wake us again at once:
		 * stop listening for a moment instead of spinning. */
		log_warn("accept: %s; pausing new connections for 100 ms", strerror(errno));
		agent_listeners_set(a, loop, 0);
		ev_timer_set(&a->accept_pause, 0.1, 0.);
		ev_timer_start(loop, &a->accept_pause);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		log_warn("accept: %s", strerror(errno));
	}
}

static void agent_on_journal_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	journal_tick(((struct agent *)t->data)->journal);
}

/* The writer's hook: a row stored (or given up) resolves its journal entries. */
static void agent_on_rows_done(void *arg, const struct acct_row *rows, size_t n, int committed)
{
	struct agent *a = arg;
	size_t i;

	(void)committed;
	for (i = 0; i < n; i++) {
		journal_release(a->journal, rows[i].journal_epoch[0]);
		journal_release(a->journal, rows[i].journal_epoch[1]);
	}
}

static int agent_recover(struct agent *a, char *err, size_t errlen)
{
	struct recovery_target t = {
		.db = a->db,
		.journal = a->journal,
		.log = a->jlog,
		.pending = a->pending,
		.queue = a->queue,
		.keylive = a->keylive,
		.owners = a->owners,
		.spill = a->spill,
	};
	struct recovery_result res;

	if (recovery_run(&t, &res, err, errlen) < 0)
		return -1;
	if (res.entries > 0)
		log_info("journal: %ld entries from an earlier run: %ld rows queued, %ld requests"
		         " awaiting their record, %ld dropped (no room under --pending-max)",
		         res.entries, res.queued, res.pending, res.dropped);
	return 0;
}

static size_t agent_live_queue_depth(void *arg)
{
	return queue_depth(((struct agent *)arg)->queue);
}

static size_t agent_live_queue_capacity(void *arg)
{
	return queue_capacity(((struct agent *)arg)->queue);
}

static size_t agent_live_stored_responses(void *arg)
{
	return owner_count(((struct agent *)arg)->owners);
}

static size_t agent_live_inflight(void *arg)
{
	return pending_count(((struct agent *)arg)->pending);
}

static void agent_live_keys(void *arg, void (*cb)(void *cbarg, const struct live_key *k),
                            void *cbarg)
{
	keylive_each(((struct agent *)arg)->keylive, cb, cbarg);
}

static void agent_live_txns(void *arg, size_t max,
                            void (*cb)(void *cbarg, const struct live_txn *t), void *cbarg)
{
	pending_each(((struct agent *)arg)->pending, max, (int64_t)(ev_time() * 1000), cb, cbarg);
}

/* When this node last committed its counters (unix seconds; 0: never). Its own row:
 * HAProxy's ring backlog is this node's, and another node's commit says nothing of
 * which of its records were stored (db_accounted_at is the newest of every node). */
static int agent_accounted_at(struct agent *a, int64_t *out, char *err, size_t errlen)
{
	struct db_stmt *st = NULL;
	enum db_status rc = DB_ERROR;

	*out = 0;
	if (db_prepare(a->db, "SELECT updated_at FROM accounting WHERE node = ?1", &st) == 0 &&
	    db_bind_text(st, 1, a->cfg.node, strlen(a->cfg.node)) == 0 &&
	    (rc = db_step(st)) == DB_ROW)
		*out = db_col_int(st, 0);
	if (rc != DB_ROW && rc != DB_DONE)
		snprintf(err, errlen, "reading this node's accounting row: %s", db_errmsg(a->db));
	db_finalize(st);
	return rc == DB_ROW || rc == DB_DONE ? 0 : -1;
}

/* Everything that accounting needs before any request arrives: counters from the
 * database, the journal's leftovers, the queue and its writer. */
static int agent_start_accounting(struct agent *a, char *err, size_t errlen)
{
	struct writer_config wc = {
		.db_path = a->cfg.db_path,
		.node = a->cfg.node,
		.batch_max = a->cfg.batch_max,
		.retry_ms = a->cfg.write_retry_ms,
		.max_db_pages = a->cfg.db_max_pages,
		.on_done = agent_on_rows_done,
		.on_done_arg = a,
	};
	int64_t accounted_at;

	/* Records that ended before this node's earlier run's last commit, less a margin
	 * for those it had read but not stored, were accounted by it; read before this run
	 * commits. */
	if (agent_accounted_at(a, &accounted_at, err, errlen) < 0)
		return -1;
	a->backlog_from_ms = accounted_at > 10 ? (accounted_at - 10) * 1000 : 0;
	if (writer_load_counters(a->db, a->cfg.node, err, errlen) < 0)
		return -1;
	a->queue = queue_new((size_t)a->cfg.queue_capacity);
	a->pending = pending_new((size_t)a->cfg.pending_max);
	a->keylive = keylive_new();
	a->quota = quota_new();
	a->longbody = a->cfg.long_body_memory ?
	              longbody_new((size_t)a->cfg.long_body_memory,
	                           (size_t)a->cfg.long_body_key_memory) : NULL;
	a->owners = owner_new((size_t)a->cfg.stored_responses);
	if (a->owners && owner_set_store(a->owners, a->cfg.db_path) < 0) {
		snprintf(err, errlen, "database path too long");
		return -1;
	}
	a->usage = usageview_new(a->cfg.db_path);
	if (!a->queue || !a->pending || !a->keylive || !a->quota || !a->owners || !a->usage ||
	    (a->cfg.long_body_memory && !a->longbody)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (!(a->journal = journal_open(a->cfg.journal_dir, 10, err, errlen)))
		return -1;
	if (!(a->jlog = journal_log_open(a->journal, "main"))) {
		snprintf(err, errlen, "cannot open a journal in %s", a->cfg.journal_dir);
		return -1;
	}
	if (owner_load(a->owners, a->db, acct_now_ms() / 1000 - OWNER_RETENTION_S, err, errlen) < 0)
		return -1;
	/* Emptied: the journal replays whatever an earlier run had spilled. Before the
	 * replay, which spills what the queue has no room for. */
	if (!(a->spill = spill_open(a->cfg.journal_dir, (int64_t)a->cfg.spill_max_mb << 20, err,
	                            errlen)))
		return -1;
	if (agent_recover(a, err, errlen) < 0)
		return -1;
	wc.queue = a->queue;
	wc.spill = a->spill;
	if (!(a->writer = writer_start(&wc, err, errlen)))
		return -1;
	a->live = (struct live_view){
		.arg = a,
		.queue_depth = agent_live_queue_depth,
		.queue_capacity = agent_live_queue_capacity,
		.inflight = agent_live_inflight,
		.stored_responses = agent_live_stored_responses,
		.keys = agent_live_keys,
		.txns = agent_live_txns,
	};
	return 0;
}

static void agent_on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	(void)revents;
	log_info("signal %d: shutting down", s->signum);
	ev_break(loop, EVBREAK_ALL);
}

static int agent_open(struct agent *a, char *err, size_t errlen)
{
	char secret_path[CONFIG_PATH_MAX + 16];
	int rc;

	if (db_open(a->cfg.db_path, DB_CREATE, &a->db, err, errlen) < 0)
		return -1;
	if (keyhash_secret_path(a->cfg.secret_path, a->cfg.db_path, secret_path,
	                        sizeof(secret_path)) < 0) {
		snprintf(err, errlen, "database path too long");
		return -1;
	}
	/* On PostgreSQL the secret is every node's and tallyctl's: one made here would
	 * match no key made elsewhere, so a node without it refuses to start. */
	if (keyhash_secret_load(secret_path, !db_is_postgres(a->cfg.db_path), a->secret, err,
	                        errlen) < 0)
		return -1;
	/* The operator's own, or the one derived from the key-hashing secret. */
	if ((rc = gwsecret_from_env(&a->gateway_secret, err, errlen)) == 0)
		gwsecret_derive(a->secret, &a->gateway_secret);
	return rc < 0 ? -1 : 0;
}

static int agent_start_workers(struct agent *a, char *err, size_t errlen)
{
	struct worker_conn_cfg conn = {
		.max_frame_size = a->cfg.max_frame_size,
		.max_connections = (a->cfg.max_connections + a->cfg.threads - 1) / a->cfg.threads,
		.max_fresh = (a->cfg.max_unauthenticated + a->cfg.threads - 1) / a->cfg.threads,
		.auth_timeout = a->cfg.auth_timeout_ms / 1000.0,
		.idle_timeout = a->cfg.idle_timeout_ms / 1000.0,
	};
	struct worker_acct acct = {
		.pending = a->pending,
		.keylive = a->keylive,
		.journal = a->journal,
		.quota = a->quota,
		.default_max_tokens = a->cfg.default_max_tokens,
		.secret = &a->gateway_secret,
		.longbody = a->longbody,
		.owners = a->owners,
		.usage = a->usage,
		.policy = &a->policy,
	};
	struct intake_config ic = {
		.addr = a->cfg.records_addr,
		.pending_timeout_ms = a->cfg.pending_timeout_ms,
		.dedupe_ms = a->cfg.dedupe_ms,
		.queue = a->queue,
		.spill = a->spill,
		.pending = a->pending,
		.keylive = a->keylive,
		.owners = a->owners,
		.journal = a->journal,
		.quota = a->quota,
		.default_max_tokens = a->cfg.default_max_tokens,
		.secret = &a->gateway_secret,
		.haproxy_socket = a->cfg.haproxy_socket,
		.ring = a->cfg.haproxy_ring,
		.backlog_from_ms = a->backlog_from_ms,
	};
	struct keytable *kt;
	int i;

	a->policy = (struct decision_policy){ a->cfg.service_tiers, a->cfg.server_tools,
	                                      a->cfg.audio, a->cfg.cache_writes, a->cfg.max_body };
	if (keytable_load(a->db, a->secret, &kt, err, errlen) < 0)
		return -1;
	a->generation = kt->generation;
	if (spend_seed(a->db, kt, a->quota, acct_now_ms(), err, errlen) < 0) {
		keytable_unref(kt);
		return -1;
	}
	log_info("loaded %zu keys, %zu models, %zu providers", kt->nkeys, kt->nmodels, kt->nproviders);
	/* One reference per I/O thread, one for the intake and one for the reload
	 * thread (agent_start_reload: a->kt until then). */
	keytable_ref(kt, a->cfg.threads + 1);
	a->kt = kt;
	if (!(a->intake = intake_start(&ic, kt, err, errlen))) {
		for (i = 0; i < a->cfg.threads; i++)
			keytable_unref(kt);
		return -1;
	}
	log_info("records on %s (TCP and UDP)", a->cfg.records_addr);
	for (i = 0; i < a->cfg.threads; i++) {
		a->workers[i] = worker_start(i, &conn, &acct, kt, err, errlen);
		if (!a->workers[i]) {
			for (; i < a->cfg.threads; i++)
				keytable_unref(kt);
			return -1;
		}
		a->nworkers++;
	}
	return 0;
}

static int agent_start_reload(struct agent *a, char *err, size_t errlen)
{
	struct reload_target t;

	/* The teams' spend is read for the metrics' gauges alone. */
	if (a->cfg.metrics_addr[0] && !(a->teams = teamspend_new())) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	t = (struct reload_target){
		.db = a->db,
		.secret = a->secret,
		.quota = a->quota,
		.workers = a->workers,
		.nworkers = a->nworkers,
		.intake = a->intake,
		.kt = a->kt,
		.generation = a->generation,
		.interval_ms = a->cfg.reload_interval_ms,
		.teams = a->teams,
	};

	a->kt = NULL;     /* the reload thread's now, whatever reload_start says */
	a->reload = reload_start(&t, err, errlen);
	return a->reload ? 0 : -1;
}

/* On PostgreSQL, limits hold across the nodes that share the store: before any
 * decision, quota admits against grants the share thread leases. */
static int agent_start_share(struct agent *a, char *err, size_t errlen)
{
	struct share_config c = {
		.db_path = a->cfg.db_path,
		.node = a->cfg.node,
		.quota = a->quota,
		.interval_ms = a->cfg.lease_interval_ms,
		.ttl_ms = a->cfg.lease_ttl_ms,
		.hold_ms = a->cfg.lease_hold_ms,
	};

	if (!db_is_postgres(a->cfg.db_path))
		return 0;
	quota_share_enable(a->quota, a->cfg.lease_wait_ms);
	a->share = share_start(&c, err, errlen);
	return a->share ? 0 : -1;
}

static int agent_listen(struct agent *a, struct ev_loop *loop, char *err, size_t errlen)
{
	int i;

	for (i = 0; i < a->cfg.nlisten; i++) {
		int fd = net_listen(a->cfg.listen[i], err, errlen);

		if (fd < 0)
			return -1;
		ev_io_init(&a->listeners[i], agent_on_accept, fd, EV_READ);
		a->listeners[i].data = a;
		ev_io_start(loop, &a->listeners[i]);
		a->nlisteners++;
		log_info("listening on %s", a->cfg.listen[i]);
	}
	return 0;
}

static void agent_shutdown(struct agent *a, struct ev_loop *loop)
{
	struct worker_totals t;
	int i;

	reload_stop(a->reload);   /* before the workers it posts to */
	for (i = 0; i < a->nlisteners; i++) {
		ev_io_stop(loop, &a->listeners[i]);
		close(a->listeners[i].fd);
		net_unlisten(a->cfg.listen[i]);
	}
	for (i = 0; i < a->nworkers; i++) {
		worker_stop(a->workers[i], &t);
		log_info("worker %d: %llu connections (%llu refused, %llu closed without the secret"
		         " for newer ones, %llu timed out), %llu notifies, %llu allowed, %llu"
		         " unreadable, %llu unknown frames", i,
		         (unsigned long long)t.connections, (unsigned long long)t.refused,
		         (unsigned long long)t.evicted,
		         (unsigned long long)t.timeouts, (unsigned long long)t.notifies,
		         (unsigned long long)t.verdicts[DECISION_ALLOW],
		         (unsigned long long)t.bad_messages, (unsigned long long)t.skipped_frames);
	}
	/* After the I/O threads, which may wait for its rounds. */
	share_stop(a->share);
	/* Records stop before the writer drains: what was read is stored. */
	if (a->intake)
		intake_stop(a->intake);
	if (a->writer) {
		struct counters c;

		writer_stop(a->writer);
		c = counters_now();
		log_info("accounting: %llu received, %llu written, %llu dropped, %llu duplicates,"
		         " %zu requests still awaiting their record and %zu rows the store refused"
		         " (kept in the journal)",
		         (unsigned long long)c.received, (unsigned long long)c.written,
		         (unsigned long long)c.dropped, (unsigned long long)c.duplicates,
		         a->pending ? pending_count(a->pending) : 0, spill_rows(a->spill));
	}
	if (a->control)
		control_stop(a->control);
	if (a->metrics)
		metrics_stop(a->metrics);
	if (a->jlog) {
		journal_flush(a->jlog);
		journal_log_close(a->jlog);
	}
	if (a->journal)
		journal_close(a->journal);
	spill_close(a->spill);
	queue_free(a->queue);
	pending_free(a->pending);
	keylive_free(a->keylive);
	quota_free(a->quota);
	teamspend_free(a->teams);
	longbody_free(a->longbody);
	keytable_unref(a->kt);
	owner_free(a->owners);
	usageview_free(a->usage);
	db_close(a->db);
}

int main(int argc, char **argv)
{
	static struct agent a;
	struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
	char err[2048], store[CONFIG_PATH_MAX];
	int ret = 1;

	switch (config_parse(&a.cfg, argc, argv, err, sizeof(err))) {
	case CONFIG_EXIT_OK:
		return 0;
	case CONFIG_ERROR:
		if (a.cfg.self_check)
			return selfcheck_agent(stdout, NULL, err);
		fprintf(stderr, "tally-agent: %s\n", err);
		return 2;
	case CONFIG_OK:
		break;
	}
	if (a.cfg.self_check)
		return selfcheck_agent(stdout, &a.cfg, NULL);
	log_set_level(a.cfg.log_level);
	net_set_unix_mode(a.cfg.unix_mode);
	signal(SIGPIPE, SIG_IGN);
	/* Before anything listens: a stop sent as soon as a port answers is a clean
	 * shutdown once the loop runs, never death by the signal. */
	ev_signal_init(&a.sigint, agent_on_signal, SIGINT);
	ev_signal_init(&a.sigterm, agent_on_signal, SIGTERM);
	ev_signal_start(loop, &a.sigint);
	ev_signal_start(loop, &a.sigterm);
	if (agent_open(&a, err, sizeof(err)) < 0 || agent_start_accounting(&a, err, sizeof(err)) < 0 ||
	    agent_start_workers(&a, err, sizeof(err)) < 0 ||
	    agent_start_reload(&a, err, sizeof(err)) < 0 ||
	    agent_start_share(&a, err, sizeof(err)) < 0 ||
	    agent_listen(&a, loop, err, sizeof(err)) < 0 ||
	    !(a.control = control_start(loop, a.cfg.control_path, &a.live, err, sizeof(err))) ||
	    (a.cfg.metrics_addr[0] &&
	     !(a.metrics = metrics_start(loop, a.cfg.metrics_addr, &a.live, err, sizeof(err))))) {
		log_error("%s", err);
		goto out;
	}
	if (a.metrics && a.share)
		metrics_set_share(a.metrics, a.share);
	if (a.metrics)
		metrics_set_teamspend(a.metrics, a.teams);
	ev_timer_init(&a.journal_tick, agent_on_journal_tick, 1.0, 1.0);
	a.journal_tick.data = &a;
	ev_timer_start(loop, &a.journal_tick);
	ev_init(&a.accept_pause, agent_on_accept_resume);
	a.accept_pause.data = &a;
	log_info("tally-agent ready: %d I/O threads, node %s, database %s", a.nworkers, a.cfg.node,
	         db_store_name(a.cfg.db_path, store, sizeof(store)));
	ev_run(loop, 0);
	ret = 0;
out:
	agent_shutdown(&a, loop);
	return ret;
}
