/* intake: the record intake thread (see intake.h).
 *
 * DESIGN. HAProxy writes one log record per transaction after its response ended, to
 * a ring that forwards it over TCP, and a copy over UDP: the ring keeps a backlog
 * while the agent restarts, the UDP copy survives an HAProxy reload (the old process's
 * ring record is lost then). Every record therefore usually arrives twice; the first
 * copy makes the row, the second is counted as a duplicate. The row joins the record
 * with the pending entry the I/O thread left at decision time; a pending entry whose
 * record does not come within the timeout becomes a no_record row. This thread owns
 * one libev loop, its sockets, the dedupe set and a keytable reference (for prices);
 * other threads reach it only through an ev_async (new snapshot, stop). */
#include "intake.h"

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "acct.h"
#include "counters.h"
#include "dedupe.h"
#include "join.h"
#include "journal.h"
#include "keylive.h"
#include "keytable.h"
#include "log.h"
#include "net.h"
#include "owner.h"
#include "pending.h"
#include "queue.h"
#include "record.h"
#include "ringfetch.h"
#include "spill.h"
#include "stats.h"
#include "thread.h"

#define INTAKE_MAX_RECORD 65536       /* HAProxy's "len" on the log lines is 8192 */
#define INTAKE_MAX_CONNS 64
#define INTAKE_BUF (2 * INTAKE_MAX_RECORD)
#define INTAKE_LATE_MS 60000          /* a decision later than this after its record: none */
#define INTAKE_BACKLOG_MS 2000        /* the ring's backlog is read within this */
#define INTAKE_BACKLOG_MARGIN_MS 2000 /* reread this much before what was delivered */

/* Where a record came from. */
enum intake_source { INTAKE_TCP, INTAKE_UDP, INTAKE_BACKLOG };

struct intake_conn {
	struct intake *in;
	ev_io io;
	ev_tstamp accepted;
	int authentic;                    /* has delivered a record with the secret */
	size_t len;
	char buf[INTAKE_BUF];
};

struct intake {
	struct intake_config cfg;
	struct ev_loop *loop;
	pthread_t thread;
	ev_io listen_io, udp_io;
	ev_async wake;
	ev_timer tick;
	ev_prepare flush;                 /* journal flush once per loop iteration */
	struct intake_conn *conns[INTAKE_MAX_CONNS];
	struct dedupe *seen;
	struct gwsecret_mac *mac;         /* checks records' MACs (this thread's) */
	struct journal_log *jlog;
	struct hold_ctx hold;             /* cfg's quota, keylive, owners and journal */
	struct keytable *kt;
	int64_t delivered_ms;             /* end of the newest ring record, sent or read back */
	int64_t backlog_from_ms;          /* reading the backlog: the records that ended in */
	int64_t backlog_until_ms;         /* [from, until) are the ones it may lack */
	pthread_mutex_t lock;             /* guards the two fields below */
	struct keytable *next_kt;
	int stopping;
	double last_error_log;
};

void intake_emit(struct queue *q, struct spill *sp, const struct hold_ctx *h,
                 struct journal_log *log, struct acct_row *row, enum hold_event e)
{
	struct journal *j = h->journal;

	/* Its key owns the response before the create counts as ended: a read waiting for
	 * the create's row then finds the id (decision.h). */
	if (h->owners && row->response_id[0])
		owner_put(h->owners, row->response_id, row->key_id, row->model_requested,
		          (row->prompt_tokens > 0 ? row->prompt_tokens : 0) +
		          (row->completion_tokens > 0 ? row->completion_tokens : 0));
	hold_apply(h, e, row, 0, acct_now_ms());
	if (h->keylive)
		keylive_row(h->keylive, row);
	stats_add(&stats.outcomes[row->outcome < ACCT_OUTCOME_COUNT ? row->outcome : 0], 1);
	if (row->model_reported[0])
		stats_add(&stats.model_mismatches, 1);
	if (log)
		row->journal_epoch[1] = journal_append(log, JOURNAL_ROW, row);
	/* A full queue: the writer is behind (or the store fails); the row waits on disk. */
	if (queue_push(q, row) < 0 && (!sp || spill_push(sp, row) < 0)) {
		counters_drop(1);
		if (j) {
			journal_release(j, row->journal_epoch[0]);
			journal_release(j, row->journal_epoch[1]);
		}
	}
}

static void intake_error(struct intake *in, enum stats_error e, const char *what)
{
	stats_add(&stats.errors[e], 1);
	if (ev_now(in->loop) - in->last_error_log >= 1.0) {
		in->last_error_log = ev_now(in->loop);
		log_warn("intake: %s (counted in errors_total{kind=\"%s\"})", what, stats_error_name(e));
	}
}

/* When the transaction of r ended (unix ms). */
static int64_t intake_end_ms(const struct record *r)
{
	return r->accept_s * 1000 + r->accept_ms + (r->ta > 0 ? r->ta : 0);
}

/* Accounts for one record. 0, or -1 if it was refused as unreadable or unauthenticated. */
static int intake_record(struct intake *in, const char *msg, size_t len,
                         enum intake_source src)
{
	struct record r;
	struct acct_row row, pending;
	char id[ACCT_ID_MAX];
	enum join_fate fate;
	int seen, admitted;
	int64_t now = acct_now_ms(), end;

	if (record_parse(msg, len, &r) < 0) {
		char what[160];

		/* The record's start names the request and shows what HAProxy sent. */
		snprintf(what, sizeof(what), "unreadable record \"%.*s\"",
		         (int)(len < 120 ? len : 120), msg);
		intake_error(in, STATS_ERR_RECORD_PARSE, what);
		return -1;
	}
	end = intake_end_ms(&r);
	record_name(&r, id, sizeof(id));
	seen = dedupe_seen(in->seen, id);
	/* Reading the ring again is no arrival: outside the window it lacks, or seen, a
	 * record counts nothing (and costs no MAC check). */
	if (src == INTAKE_BACKLOG &&
	    (end < in->backlog_from_ms || end >= in->backlog_until_ms || seen))
		return 0;
	if (!record_authentic(&r, in->mac)) {
		/* Not from the gateway's HAProxy: it must not make, or pre-empt, a row. */
		counters_refuse_unauthenticated();
		intake_error(in, STATS_ERR_RECORD_UNAUTHENTICATED,
		             "a record without the gateway secret, refused");
		return -1;
	}
	/* The ring's records, sent or read back, are complete up to this one. */
	if (src != INTAKE_UDP && end > in->delivered_ms)
		in->delivered_ms = end;
	stats_add(src == INTAKE_UDP ? &stats.records_udp :
	          src == INTAKE_TCP ? &stats.records_tcp : &stats.records_backlog, 1);
	admitted = !seen && pending_take(in->cfg.pending, id, &pending);
	fate = join_record_fate(seen, admitted);
	join_count(fate);
	if (fate == JOIN_REPEAT)
		return 0;
	/* Never decided by this agent (HAProxy answered alone, failed open, or an earlier
	 * agent decided it and its pending entry is gone), and HAProxy stopped waiting for
	 * the agent: its decision may still come, and must not hold a key's limits until
	 * the pending timeout. */
	if (join_record_ends_wait(admitted, r.spoe_error))
		pending_finish(in->cfg.pending, id, now);
	join_record(&r, id, admitted ? &pending : NULL, in->kt, in->cfg.default_max_tokens, &row);
	dedupe_add(in->seen, id, now);
	intake_emit(in->cfg.queue, in->cfg.spill, &in->hold, in->jlog, &row,
	            admitted ? HOLD_RECORD : HOLD_UNHELD);
	return 0;
}

/* A decided transaction whose record never came: what the decision knew. */
static void intake_on_expired(void *arg, const struct acct_row *pending_row)
{
	struct intake *in = arg;
	struct acct_row row;
	enum join_fate fate = join_expiry_fate(dedupe_seen(in->seen, pending_row->request_id));

	join_count(fate);
	if (fate == JOIN_RECOUNTED) {
		/* Its record came before its decision was noted (the decision was late and
		 * HAProxy had answered alone): the row exists already. */
		hold_apply(&in->hold, HOLD_RECOUNTED, pending_row, 0, acct_now_ms());
		return;
	}
	join_expired(pending_row, in->kt, &row);
	dedupe_add(in->seen, row.request_id, acct_now_ms());
	intake_emit(in->cfg.queue, in->cfg.spill, &in->hold, in->jlog, &row, HOLD_EXPIRED);
}

static void intake_on_tick(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct intake *in = t->data;
	int64_t now = acct_now_ms();

	(void)loop;
	(void)revents;
	pending_expire(in->cfg.pending, now - in->cfg.pending_timeout_ms, now - INTAKE_LATE_MS,
	               intake_on_expired, in);
	dedupe_expire(in->seen, now);
}

static void intake_on_flush(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct intake *in = p->data;

	(void)loop;
	(void)revents;
	if (in->jlog)
		journal_flush(in->jlog);
}

static void intake_backlog_line(void *arg, const char *line, size_t len)
{
	struct intake *in = arg;

	/* Anything else is the CLI's own answer (an unknown ring, a refused command). */
	if (len < 6 || memcmp(line, "tally", 5) != 0) {
		log_warn("intake: HAProxy's CLI answered \"%.*s\" to show events %s",
		         (int)(len < 120 ? len : 120), line, in->cfg.ring);
		return;
	}
	intake_record(in, line, len, INTAKE_BACKLOG);
}

/* Reads the records the ring holds that ended in [from_ms, until_ms) (see intake.h). */
static void intake_backlog(struct intake *in, int64_t from_ms, int64_t until_ms)
{
	char err[256];
	long n;

	if (!in->cfg.haproxy_socket || !in->cfg.haproxy_socket[0])
		return;
	in->backlog_from_ms = from_ms;
	in->backlog_until_ms = until_ms;
	n = ringfetch_events(in->cfg.haproxy_socket, in->cfg.ring, INTAKE_BACKLOG_MS,
	                     intake_backlog_line, in, err, sizeof(err));
	if (n == RINGFETCH_ABSENT)
		log_info("intake: no HAProxy at %s yet, so no ring backlog to read",
		         in->cfg.haproxy_socket);
	else if (n < 0)
		log_info("intake: the ring's backlog was not read: %s", err);
	else
		log_debug("intake: %ld records in the ring %s", n, in->cfg.ring);
}

static void intake_conn_close(struct intake_conn *c)
{
	struct intake *in = c->in;
	int i;

	ev_io_stop(in->loop, &c->io);
	close(c->io.fd);
	for (i = 0; i < INTAKE_MAX_CONNS; i++)
		if (in->conns[i] == c)
			in->conns[i] = NULL;
	free(c);
}

static void intake_on_conn(struct ev_loop *loop, ev_io *io, int revents)
{
	struct intake_conn *c = io->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	for (;;) {
		size_t used = 0;
		const char *msg;
		size_t msg_len, consumed;
		int rc;

		n = read(io->fd, c->buf + c->len, sizeof(c->buf) - c->len);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			intake_conn_close(c);
			return;
		}
		if (n < 0)
			return;
		c->len += (size_t)n;
		while ((rc = record_frame_next(c->buf + used, c->len - used, INTAKE_MAX_RECORD,
		                               &msg, &msg_len, &consumed)) == 1) {
			int64_t delivered = c->in->delivered_ms;

			if (intake_record(c->in, msg, msg_len, INTAKE_TCP) == 0 && !c->authentic) {
				/* HAProxy's ring connected (again): what it held meanwhile and
				 * will not send is read from the ring itself, up to the first
				 * record this connection brought. */
				c->authentic = 1;
				intake_backlog(c->in, delivered ? delivered - INTAKE_BACKLOG_MARGIN_MS
				                                : c->in->cfg.backlog_from_ms,
				               c->in->delivered_ms);
			}
			used += consumed;
		}
		if (rc < 0) {
			intake_error(c->in, STATS_ERR_RECORD_TOO_LONG, "broken record framing; closing");
			intake_conn_close(c);
			return;
		}
		memmove(c->buf, c->buf + used, c->len - used);
		c->len -= used;
	}
}

/* A free connection slot, or else the slot of the oldest connection that never
 * delivered an authentic record, closed to make room: a neighbour holding connections
 * open must not keep HAProxy's ring out. -1 if every slot holds HAProxy's. */
static int intake_free_slot(struct intake *in)
{
	int i, oldest = -1;

	for (i = 0; i < INTAKE_MAX_CONNS; i++) {
		if (!in->conns[i])
			return i;
		if (!in->conns[i]->authentic &&
		    (oldest < 0 || in->conns[i]->accepted < in->conns[oldest]->accepted))
			oldest = i;
	}
	if (oldest >= 0)
		intake_conn_close(in->conns[oldest]);
	return oldest;
}

static void intake_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct intake *in = io->data;
	int fd, i;

	(void)revents;
	while ((fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct intake_conn *c = NULL;

		i = intake_free_slot(in);
		if (i < 0 || !(c = calloc(1, sizeof(*c)))) {
			log_warn("intake: refusing a record connection (%s)",
			         c ? "too many" : "out of memory");
			close(fd);
			continue;
		}
		c->in = in;
		c->accepted = ev_now(loop);
		in->conns[i] = c;
		ev_io_init(&c->io, intake_on_conn, fd, EV_READ);
		c->io.data = c;
		ev_io_start(loop, &c->io);
	}
}

static void intake_on_udp(struct ev_loop *loop, ev_io *io, int revents)
{
	struct intake *in = io->data;
	static char buf[INTAKE_MAX_RECORD];
	ssize_t n;
	int budget = 1024;   /* let the TCP side and timers run under a flood */

	(void)loop;
	(void)revents;
	while (budget-- > 0 && (n = recv(io->fd, buf, sizeof(buf), MSG_TRUNC)) >= 0) {
		if ((size_t)n > sizeof(buf)) {
			intake_error(in, STATS_ERR_RECORD_TOO_LONG, "oversized datagram");
			continue;
		}
		intake_record(in, buf, (size_t)n, INTAKE_UDP);
	}
}

static void intake_on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
	struct intake *in = a->data;
	struct keytable *kt;
	int stopping;

	(void)revents;
	pthread_mutex_lock(&in->lock);
	kt = in->next_kt;
	in->next_kt = NULL;
	stopping = in->stopping;
	pthread_mutex_unlock(&in->lock);
	if (kt) {
		keytable_unref(in->kt);
		in->kt = kt;
	}
	if (stopping)
		ev_break(loop, EVBREAK_ALL);
}

static void *intake_main(void *arg)
{
	struct intake *in = arg;

	intake_backlog(in, in->cfg.backlog_from_ms, INT64_MAX);
	ev_run(in->loop, 0);
	/* Records read in the last iteration are journaled before the thread ends. */
	if (in->jlog)
		journal_flush(in->jlog);
	return NULL;
}

/* What intake_start made, once its sockets are closed and its thread is gone. */
static void intake_free(struct intake *in)
{
	if (in->jlog)
		journal_log_close(in->jlog);
	if (in->loop)
		ev_loop_destroy(in->loop);
	keytable_unref(in->next_kt);
	keytable_unref(in->kt);
	dedupe_free(in->seen);
	gwsecret_mac_free(in->mac);
	pthread_mutex_destroy(&in->lock);
	free(in);
}

struct intake *intake_start(const struct intake_config *cfg, struct keytable *kt,
                            char *err, size_t errlen)
{
	struct intake *in = calloc(1, sizeof(*in));
	int lfd = -1, ufd = -1;

	if (!in) {
		snprintf(err, errlen, "intake: out of memory");
		keytable_unref(kt);
		return NULL;
	}
	in->cfg = *cfg;
	in->hold = (struct hold_ctx){ cfg->quota, cfg->keylive, cfg->owners, cfg->journal };
	in->kt = kt;
	pthread_mutex_init(&in->lock, NULL);
	if ((lfd = net_listen(cfg->addr, err, errlen)) < 0 ||
	    (ufd = net_bind_udp(cfg->addr, err, errlen)) < 0)
		goto fail;
	if (!(in->seen = dedupe_new(cfg->dedupe_ms)) || !(in->loop = ev_loop_new(EVFLAG_AUTO)) ||
	    !(in->mac = gwsecret_mac_new(cfg->secret))) {
		snprintf(err, errlen, "intake: out of memory");
		goto fail;
	}
	if (cfg->journal && !(in->jlog = journal_log_open(cfg->journal, "intake"))) {
		snprintf(err, errlen, "intake: cannot open its journal");
		goto fail;
	}
	ev_io_init(&in->listen_io, intake_on_accept, lfd, EV_READ);
	in->listen_io.data = in;
	ev_io_init(&in->udp_io, intake_on_udp, ufd, EV_READ);
	in->udp_io.data = in;
	ev_async_init(&in->wake, intake_on_wake);
	in->wake.data = in;
	ev_timer_init(&in->tick, intake_on_tick, 1.0, 1.0);
	in->tick.data = in;
	ev_prepare_init(&in->flush, intake_on_flush);
	in->flush.data = in;
	ev_io_start(in->loop, &in->listen_io);
	ev_io_start(in->loop, &in->udp_io);
	ev_async_start(in->loop, &in->wake);
	ev_timer_start(in->loop, &in->tick);
	ev_prepare_start(in->loop, &in->flush);
	if (thread_start(&in->thread, "tally-intake", intake_main, in, err, errlen) < 0)
		goto fail;
	return in;
fail:
	if (lfd >= 0)
		close(lfd);
	if (ufd >= 0)
		close(ufd);
	intake_free(in);
	return NULL;
}

void intake_post_keytable(struct intake *in, struct keytable *kt)
{
	struct keytable *old;

	pthread_mutex_lock(&in->lock);
	old = in->next_kt;
	in->next_kt = kt;
	ev_async_send(in->loop, &in->wake);
	pthread_mutex_unlock(&in->lock);
	keytable_unref(old);
}

void intake_stop(struct intake *in)
{
	int i;

	pthread_mutex_lock(&in->lock);
	in->stopping = 1;
	ev_async_send(in->loop, &in->wake);
	pthread_mutex_unlock(&in->lock);
	pthread_join(in->thread, NULL);
	for (i = 0; i < INTAKE_MAX_CONNS; i++)
		if (in->conns[i])
			intake_conn_close(in->conns[i]);
	close(in->listen_io.fd);
	close(in->udp_io.fd);
	intake_free(in);
}
