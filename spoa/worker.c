/* worker: agent I/O threads. worker_start, worker_post_* and worker_stop run on the
 * main thread; everything else runs on the worker's own thread, in its libev loop.
 *
 * DESIGN
 * The main thread accepts SPOP connections and hands each to a worker, round robin,
 * through the worker's inbox: a mutex-protected list and an ev_async that wakes the
 * loop (libev's cross-thread hand-off; memcached's thread.c does the same with a pipe).
 * New keytable snapshots travel the same way, so reading the snapshot takes no lock.
 * The request path does take the short locks of the tables it shares with the other
 * threads (docs/architecture.md, "Locks a request takes"): the pending shard and the
 * keylive mutex here, the quota shard of a limited key (which may wait up to
 * --lease-wait-ms for a round in shared mode), and the owner and long-body mutexes
 * for the requests that need them.
 *
 * A connection reads into a buffer as large as the largest frame accepted, lets the
 * session consume whole frames, and writes the replies. While replies cannot be sent
 * the connection stops reading, so a slow HAProxy cannot make the agent buffer
 * without bound. A timer closes connections that stay silent past the idle timeout
 * (HAProxy closes its idle SPOP connections sooner).
 *
 * Anyone who reaches the port can connect; only the gateway's HAProxy knows the secret
 * its NOTIFYs carry. So a new connection is "fresh" until its first NOTIFY with the
 * secret: it must show it within auth_timeout of its accept (trickled bytes do not
 * extend that), and fresh connections have a budget of their own, max_fresh, in which a
 * new one takes the oldest one's place: however many connections another process
 * opens, HAProxy's new ones get in and, shown the secret within a millisecond, stay.
 * Only connections that showed it count against max_connections. HAProxy's health
 * checks (HELLO, then close) are fresh connections that end on their own. The budget
 * must exceed what HAProxy opens at once in a burst: a worker takes a burst from its
 * inbox before it reads any of them.
 *
 * Every decision leaves a pending entry for accounting (see intake.c) and a journal
 * entry; the journal is written before the ACKs of a batch go out, so that a request
 * HAProxy lets through is on disk even if the agent is killed right after. */
#include "worker.h"

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
#include "hold.h"
#include "join.h"
#include "journal.h"
#include "keytable.h"
#include "log.h"
#include "net.h"
#include "pending.h"
#include "session.h"
#include "spop.h"
#include "stats.h"
#include "thread.h"

/* Replies buffered per connection: room for this many largest frames. */
#define WORKER_OUT_FRAMES 2

enum worker_msg_kind { WORKER_MSG_CONN, WORKER_MSG_KEYTABLE, WORKER_MSG_STOP };

struct worker_msg {
	enum worker_msg_kind kind;
	int fd;
	struct keytable *kt;
	struct worker_msg *next;
};

struct worker_conn {
	struct worker *w;
	int fd;
	ev_io rio, wio;
	ev_timer timer;
	struct session sess;
	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_len, out_off, out_cap;
	int closing;                 /* close once out is flushed */
	struct worker_list *list;    /* the worker's fresh or live list */
	struct worker_conn *prev, *next;
};

/* Connections in accept order: the oldest at head. */
struct worker_list {
	struct worker_conn *head, *tail;
	int n;
};

struct worker {
	int id;
	struct worker_conn_cfg conn;
	struct worker_acct acct;
	struct journal_log *jlog;        /* loop thread only; NULL without a journal */
	struct hold_ctx hold;            /* acct's quota, keylive, owners and journal */
	pthread_t thread;
	struct ev_loop *loop;
	ev_async wake;
	pthread_mutex_t lock;
	struct worker_msg *head, *tail;  /* under lock */
	int stopping;                    /* under lock */
	struct worker_msg *stop_msg;     /* allocated up front: stopping cannot fail */
	struct keytable *kt;             /* loop thread only */
	struct worker_list fresh;        /* loop thread only: not yet shown the secret */
	struct worker_list live;         /* loop thread only: shown it */
	ev_tstamp last_refusal_log;      /* loop thread only */
	ev_tstamp last_overflow_log;     /* loop thread only */
	ev_tstamp last_evict_log;        /* loop thread only */
	struct worker_totals totals;     /* loop thread only until joined */
};

static void worker_list_push(struct worker_list *l, struct worker_conn *c)
{
	c->list = l;
	c->prev = l->tail;
	c->next = NULL;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
	l->n++;
}

static void worker_list_unlink(struct worker_conn *c)
{
	struct worker_list *l = c->list;

	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	l->n--;
}

static void worker_conn_close(struct worker_conn *c)
{
	struct worker *w = c->w;
	size_t i;

	w->totals.notifies += c->sess.stats.notifies;
	w->totals.bad_messages += c->sess.stats.bad_messages;
	w->totals.skipped_frames += c->sess.stats.skipped_frames;
	for (i = 0; i < DECISION_VERDICT_COUNT; i++)
		w->totals.verdicts[i] += c->sess.stats.verdicts[i];
	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	ev_timer_stop(w->loop, &c->timer);
	close(c->fd);
	worker_list_unlink(c);
	atomic_fetch_sub_explicit(&stats.spop_connections_open, 1, memory_order_relaxed);
	free(c->in);
	free(c->out);
	free(c);
}

/* Sends what is buffered. Returns 0 when all went out, 1 if the socket is full (the
 * write watcher is then armed), -1 if the peer is gone. */
static int worker_conn_flush(struct worker_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ev_io_stop(c->w->loop, &c->rio);
			ev_io_start(c->w->loop, &c->wio);
			return 1;
		}
		if (n < 0)
			return -1;
		c->out_off += (size_t)n;
	}
	c->out_len = c->out_off = 0;
	ev_io_stop(c->w->loop, &c->wio);
	if (!c->closing)
		ev_io_start(c->w->loop, &c->rio);
	return 0;
}

/* Lets the session consume buffered frames and sends the replies, until the input holds
 * no whole frame or the socket is full. Closes c when the conversation is over, and
 * then returns -1: the caller must not touch c. */
static int worker_conn_pump(struct worker_conn *c)
{
	for (;;) {
		struct spop_writer wr;
		size_t used = 0, pending = c->out_len;
		int rc;

		if (!c->closing) {
			spop_writer_init(&wr, c->out + c->out_len, c->out_cap - c->out_len);
			if (session_feed(&c->sess, c->w->kt, c->in, c->in_len, &used, &wr) == SESSION_CLOSE)
				c->closing = 1;
			c->out_len += wr.len;
			memmove(c->in, c->in + used, c->in_len - used);
			c->in_len -= used;
			if (used && c->w->jlog)
				journal_flush(c->w->jlog);
		}
		rc = worker_conn_flush(c);
		if (rc < 0 || (rc == 0 && c->closing)) {
			worker_conn_close(c);
			return -1;
		}
		/* Nothing consumed with an empty output means no whole frame is buffered;
		 * with replies pending, the session may have been short of room: try again
		 * now that they are sent. */
		if (rc == 1 || (used == 0 && pending == 0))
			return 0;
	}
}

static void worker_refuse(struct worker *w, int fd);

/* Progress on a connection that showed the secret restarts its idle timer; before that,
 * the deadline set at accept time runs on regardless of trickled bytes. The first
 * authentic NOTIFY makes a fresh connection live, or closes it (its ACK sent if the
 * socket took it) when max_connections live ones are open. */
static void worker_conn_touch(struct worker_conn *c)
{
	struct worker *w = c->w;

	if (c->list == &w->fresh) {
		if (!c->sess.authentic)
			return;
		if (w->live.n >= w->conn.max_connections) {
			worker_conn_close(c);
			worker_refuse(w, -1);
			return;
		}
		worker_list_unlink(c);
		worker_list_push(&w->live, c);
	}
	c->timer.repeat = w->conn.idle_timeout;
	ev_timer_again(w->loop, &c->timer);
}

static void worker_conn_on_read(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker_conn *c = io->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		if (n < 0)
			log_debug("worker %d: recv: %s", c->w->id, strerror(errno));
		worker_conn_close(c);
		return;
	}
	c->in_len += (size_t)n;
	if (worker_conn_pump(c) == 0)
		worker_conn_touch(c);
}

static void worker_conn_on_write(struct ev_loop *loop, ev_io *io, int revents)
{
	(void)loop;
	(void)revents;
	if (worker_conn_pump(io->data) == 0)
		worker_conn_touch(io->data);
}

static void worker_conn_on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker_conn *c = t->data;

	(void)loop;
	(void)revents;
	c->w->totals.timeouts++;
	log_debug("worker %d: closing a connection %s for %.1f s", c->w->id,
	          c->list == &c->w->fresh ? "without the gateway secret" : "silent", t->repeat);
	worker_conn_close(c);
}

/* Closes fd (-1: already closed), over max_connections. */
static void worker_refuse(struct worker *w, int fd)
{
	w->totals.refused++;
	if (fd >= 0)
		close(fd);
	/* At most one line a second however hard a peer pushes. */
	if (ev_now(w->loop) - w->last_refusal_log >= 1.0) {
		w->last_refusal_log = ev_now(w->loop);
		log_warn("worker %d: %d connections open, refusing more (%llu refused so far)",
		         w->id, w->live.n, (unsigned long long)w->totals.refused);
	}
}

/* Makes room for a new fresh connection: the oldest fresh one goes. */
static void worker_evict_fresh(struct worker *w)
{
	w->totals.evicted++;
	worker_conn_close(w->fresh.head);
	if (ev_now(w->loop) - w->last_evict_log >= 1.0) {
		w->last_evict_log = ev_now(w->loop);
		log_warn("worker %d: %d connections have not shown the gateway secret; closing the"
		         " oldest for each new one (%llu so far)", w->id, w->conn.max_fresh,
		         (unsigned long long)w->totals.evicted);
	}
}

/* The session's hook: records the decided transaction as pending until its record
 * comes (see intake.c), and does what that does to its hold (hold.h). A NOTIFY without
 * an id cannot be joined: nothing to record. */
static int worker_on_decided(void *arg, struct spop_str id, const struct decision *d)
{
	struct worker *w = arg;
	struct acct_row row, old;
	int64_t now = acct_now_ms();
	int allowed = d->verdict == DECISION_ALLOW;
	int rc;

	if (id.len == 0 || id.len >= ACCT_ID_MAX) {
		acct_row_init(&row);
		memcpy(row.holds, d->holds, sizeof(row.holds));
		hold_apply(&w->hold, HOLD_NO_ID, &row, allowed, now);
		return 0;
	}
	join_decided(d, id.ptr, id.len, now, &row);
	if (w->jlog)
		row.journal_epoch[0] = journal_append(w->jlog, JOURNAL_DECISION, &row);
	rc = pending_add(w->acct.pending, &row, now, &old);
	if (rc < 0) {
		/* Full (or out of memory): an admitted request must be pending, so that it ends
		 * as a row even if its record never comes; it is refused instead. A denial's
		 * row needs no pending entry: its record makes it. */
		hold_apply(&w->hold, HOLD_NOT_NOTED, &row, allowed, now);
		if (!allowed)
			return 0;
		counters_refuse_overflow();
		if (ev_now(w->loop) - w->last_overflow_log >= 1.0) {
			w->last_overflow_log = ev_now(w->loop);
			log_warn("worker %d: %zu requests await their record (--pending-max): refusing"
			         " new ones with 503", w->id, pending_count(w->acct.pending));
		}
		return -1;
	}
	join_count(join_decision_fate(rc, rc == 1 ? &old : NULL));
	/* Its record came first: HAProxy gave up on this decision and answered alone; that
	 * row is written, and the request holds nothing. */
	if (rc == 2) {
		hold_apply(&w->hold, HOLD_RECORD_FIRST, &row, allowed, now);
		return 0;
	}
	/* Decided twice: the first decision gives way. */
	if (rc == 1)
		hold_apply(&w->hold, HOLD_REPLACED, &old, allowed, now);
	hold_apply(&w->hold, HOLD_NOTED, &row, allowed, now);
	return 0;
}

static void worker_add_conn(struct worker *w, int fd)
{
	struct worker_conn *c;

	if (w->fresh.n >= w->conn.max_fresh)
		worker_evict_fresh(w);
	if (!(c = calloc(1, sizeof(*c))))
		goto fail;
	c->w = w;
	c->fd = fd;
	/* The session never lets a frame exceed max_frame_size, so one buffer of that size
	 * always holds at least one whole frame, and replies never exceed it either. */
	c->in_cap = (size_t)w->conn.max_frame_size + 4;
	c->out_cap = WORKER_OUT_FRAMES * c->in_cap;
	c->in = malloc(c->in_cap);
	c->out = malloc(c->out_cap);
	if (!c->in || !c->out)
		goto fail;
	session_init(&c->sess, w->conn.max_frame_size);
	c->sess.on_decided = worker_on_decided;
	c->sess.decided_arg = w;
	c->sess.quota = w->acct.quota;
	c->sess.default_max_tokens = w->acct.default_max_tokens;
	c->sess.secret = w->acct.secret;
	c->sess.longbody = w->acct.longbody;
	c->sess.owners = w->acct.owners;
	c->sess.usage = w->acct.usage;
	c->sess.policy = w->acct.policy;
	net_tune(fd);
	ev_io_init(&c->rio, worker_conn_on_read, fd, EV_READ);
	ev_io_init(&c->wio, worker_conn_on_write, fd, EV_WRITE);
	ev_init(&c->timer, worker_conn_on_timeout);
	c->timer.repeat = w->conn.auth_timeout;
	c->rio.data = c->wio.data = c->timer.data = c;
	worker_list_push(&w->fresh, c);
	w->totals.connections++;
	stats_add(&stats.spop_connections, 1);
	atomic_fetch_add_explicit(&stats.spop_connections_open, 1, memory_order_relaxed);
	ev_io_start(w->loop, &c->rio);
	ev_timer_again(w->loop, &c->timer);
	return;
fail:
	log_error("worker %d: out of memory for a connection", w->id);
	if (c) {
		free(c->in);
		free(c->out);
		free(c);
	}
	close(fd);
}

static void worker_set_keytable(struct worker *w, struct keytable *kt)
{
	struct keytable *old = w->kt;

	w->kt = kt;
	keytable_unref(old);
}

static void worker_on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	struct worker_msg *m;

	(void)revents;
	pthread_mutex_lock(&w->lock);
	m = w->head;
	w->head = w->tail = NULL;
	pthread_mutex_unlock(&w->lock);
	while (m) {
		struct worker_msg *next = m->next;

		switch (m->kind) {
		case WORKER_MSG_CONN:
			worker_add_conn(w, m->fd);
			break;
		case WORKER_MSG_KEYTABLE:
			worker_set_keytable(w, m->kt);
			break;
		case WORKER_MSG_STOP:
			while (w->fresh.head)
				worker_conn_close(w->fresh.head);
			while (w->live.head)
				worker_conn_close(w->live.head);
			ev_break(loop, EVBREAK_ALL);
			break;
		}
		if (m != w->stop_msg)
			free(m);
		m = next;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ev_run(w->loop, 0);
	return NULL;
}

/* Queues m; returns -1 (and keeps m) once the worker is stopping. The wake-up is sent
 * under the lock, so the loop cannot be destroyed in between (worker_stop needs the
 * lock to post its STOP first). */
static int worker_post(struct worker *w, struct worker_msg *m)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (w->stopping) {
		ret = -1;
	} else {
		if (m->kind == WORKER_MSG_STOP)
			w->stopping = 1;
		if (w->tail)
			w->tail->next = m;
		else
			w->head = m;
		w->tail = m;
		ev_async_send(w->loop, &w->wake);
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

static int worker_post_new(struct worker *w, enum worker_msg_kind kind, int fd, struct keytable *kt)
{
	struct worker_msg *m = calloc(1, sizeof(*m));

	if (!m)
		return -1;
	m->kind = kind;
	m->fd = fd;
	m->kt = kt;
	if (worker_post(w, m) < 0) {
		free(m);
		return -1;
	}
	return 0;
}

int worker_post_conn(struct worker *w, int fd)
{
	return worker_post_new(w, WORKER_MSG_CONN, fd, NULL);
}

void worker_post_keytable(struct worker *w, struct keytable *kt)
{
	if (worker_post_new(w, WORKER_MSG_KEYTABLE, -1, kt) < 0)
		keytable_unref(kt);
}

struct worker *worker_start(int id, const struct worker_conn_cfg *conn,
                            const struct worker_acct *acct, struct keytable *kt,
                            char *err, size_t errlen)
{
	struct worker *w = calloc(1, sizeof(*w));
	char tname[16];

	if (!w) {
		snprintf(err, errlen, "worker %d: out of memory", id);
		return NULL;
	}
	pthread_mutex_init(&w->lock, NULL);
	w->id = id;
	w->conn = *conn;
	w->acct = *acct;
	w->hold = (struct hold_ctx){ acct->quota, acct->keylive, acct->owners, acct->journal };
	if (acct->journal) {
		char name[32];

		snprintf(name, sizeof(name), "io%d", id);
		if (!(w->jlog = journal_log_open(acct->journal, name))) {
			snprintf(err, errlen, "worker %d: cannot open its journal", id);
			goto fail;
		}
	}
	w->stop_msg = calloc(1, sizeof(*w->stop_msg));
	w->loop = ev_loop_new(EVFLAG_AUTO);
	if (!w->stop_msg || !w->loop) {
		snprintf(err, errlen, "worker %d: cannot create its event loop", id);
		goto fail;
	}
	w->stop_msg->kind = WORKER_MSG_STOP;
	ev_async_init(&w->wake, worker_on_wake);
	w->wake.data = w;
	ev_async_start(w->loop, &w->wake);
	w->kt = kt;
	snprintf(tname, sizeof(tname), "tally-worker%d", id);
	if (thread_start(&w->thread, tname, worker_main, w, err, errlen) < 0)
		goto fail;
	return w;
fail:
	if (w->jlog)
		journal_log_close(w->jlog);
	if (w->loop)
		ev_loop_destroy(w->loop);
	free(w->stop_msg);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

void worker_stop(struct worker *w, struct worker_totals *totals)
{
	/* Only the main thread stops a worker, once: the STOP cannot be refused. */
	worker_post(w, w->stop_msg);
	pthread_join(w->thread, NULL);
	if (totals)
		*totals = w->totals;
	keytable_unref(w->kt);
	if (w->jlog)
		journal_log_close(w->jlog);
	ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->lock);
	free(w->stop_msg);
	free(w);
}
