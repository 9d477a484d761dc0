/* worker: agent I/O thread (one libev loop per thread).
 *
 * DESIGN
 * The main thread accepts SPOP connections and hands each to a worker, round robin,
 * through the worker's inbox: a mutex-protected list and an ev_async that wakes the
 * loop (libev's cross-thread hand-off; memcached's thread.c does the same with a pipe).
 * New keytable snapshots travel the same way, so a worker never takes a lock on the
 * request path: decisions read the snapshot it holds.
 *
 * A connection reads into a buffer as large as the largest frame accepted, lets the
 * session consume whole frames, and writes the replies. While replies cannot be sent
 * the connection stops reading, so a slow HAProxy cannot make the agent buffer
 * without bound. */
#include "worker.h"

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "keytable.h"
#include "log.h"
#include "net.h"
#include "session.h"
#include "spop.h"

/* Replies buffered per connection: room for this many largest frames. */
#define WORKER_OUT_FRAMES 4

enum inbox_kind { INBOX_CONN, INBOX_KEYTABLE, INBOX_STOP };

struct inbox_msg {
	enum inbox_kind kind;
	int fd;
	struct keytable *kt;
	struct inbox_msg *next;
};

struct conn {
	struct worker *w;
	int fd;
	ev_io rio, wio;
	struct session sess;
	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_len, out_off, out_cap;
	int closing;                 /* close once out is flushed */
	struct conn *prev, *next;
};

struct worker {
	int id;
	uint32_t max_frame_size;
	pthread_t thread;
	struct ev_loop *loop;
	ev_async wake;
	pthread_mutex_t lock;
	struct inbox_msg *head, *tail;   /* under lock */
	int stopping;                    /* under lock */
	struct keytable *kt;             /* loop thread only */
	struct conn *conns;              /* loop thread only */
	struct worker_totals totals;     /* loop thread only until joined */
};

static void conn_close(struct conn *c)
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
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c->in);
	free(c->out);
	free(c);
}

/* Sends what is buffered. Returns 0 when all went out, 1 if the socket is full (the
 * write watcher is then armed), -1 if the peer is gone. */
static int conn_flush(struct conn *c)
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
 * no whole frame or the socket is full. Closes c when the conversation is over. */
static void conn_pump(struct conn *c)
{
	for (;;) {
		struct spop_writer wr;
		size_t used = 0;
		int rc;

		if (!c->closing) {
			spop_writer_init(&wr, c->out + c->out_len, c->out_cap - c->out_len);
			if (session_feed(&c->sess, c->w->kt, c->in, c->in_len, &used, &wr) == SESSION_CLOSE)
				c->closing = 1;
			c->out_len += wr.len;
			memmove(c->in, c->in + used, c->in_len - used);
			c->in_len -= used;
		}
		rc = conn_flush(c);
		if (rc < 0 || (rc == 0 && c->closing)) {
			conn_close(c);
			return;
		}
		if (rc == 1 || used == 0)
			return;
	}
}

static void conn_on_read(struct ev_loop *loop, ev_io *io, int revents)
{
	struct conn *c = io->data;
	ssize_t n;

	(void)loop;
	(void)revents;
	if (c->in_len == c->in_cap)
		return;   /* cannot happen while the session consumes every whole frame */
	n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		if (n < 0)
			log_debug("worker %d: recv: %s", c->w->id, strerror(errno));
		conn_close(c);
		return;
	}
	c->in_len += (size_t)n;
	conn_pump(c);
}

static void conn_on_write(struct ev_loop *loop, ev_io *io, int revents)
{
	(void)loop;
	(void)revents;
	conn_pump(io->data);
}

static void worker_add_conn(struct worker *w, int fd)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c)
		goto fail;
	c->w = w;
	c->fd = fd;
	/* The session never lets a frame exceed max_frame_size, so one buffer of that size
	 * always holds at least one whole frame, and replies never exceed it either. */
	c->in_cap = (size_t)w->max_frame_size + 4;
	c->out_cap = WORKER_OUT_FRAMES * c->in_cap;
	c->in = malloc(c->in_cap);
	c->out = malloc(c->out_cap);
	if (!c->in || !c->out)
		goto fail;
	session_init(&c->sess, w->max_frame_size);
	net_tune(fd);
	ev_io_init(&c->rio, conn_on_read, fd, EV_READ);
	ev_io_init(&c->wio, conn_on_write, fd, EV_WRITE);
	c->rio.data = c->wio.data = c;
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	w->totals.connections++;
	ev_io_start(w->loop, &c->rio);
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
	struct inbox_msg *m;

	(void)revents;
	pthread_mutex_lock(&w->lock);
	m = w->head;
	w->head = w->tail = NULL;
	pthread_mutex_unlock(&w->lock);
	while (m) {
		struct inbox_msg *next = m->next;

		switch (m->kind) {
		case INBOX_CONN:
			worker_add_conn(w, m->fd);
			break;
		case INBOX_KEYTABLE:
			worker_set_keytable(w, m->kt);
			break;
		case INBOX_STOP:
			while (w->conns)
				conn_close(w->conns);
			ev_break(loop, EVBREAK_ALL);
			break;
		}
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

/* Queues m; returns -1 (and keeps m) once the worker is stopping. */
static int worker_post(struct worker *w, struct inbox_msg *m)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (w->stopping) {
		ret = -1;
	} else {
		if (m->kind == INBOX_STOP)
			w->stopping = 1;
		if (w->tail)
			w->tail->next = m;
		else
			w->head = m;
		w->tail = m;
	}
	pthread_mutex_unlock(&w->lock);
	if (ret == 0)
		ev_async_send(w->loop, &w->wake);
	return ret;
}

static int worker_post_new(struct worker *w, enum inbox_kind kind, int fd, struct keytable *kt)
{
	struct inbox_msg *m = calloc(1, sizeof(*m));

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
	return worker_post_new(w, INBOX_CONN, fd, NULL);
}

void worker_post_keytable(struct worker *w, struct keytable *kt)
{
	if (worker_post_new(w, INBOX_KEYTABLE, -1, kt) < 0)
		keytable_unref(kt);
}

struct worker *worker_start(int id, uint32_t max_frame_size, struct keytable *kt,
                            char *err, size_t errlen)
{
	struct worker *w = calloc(1, sizeof(*w));
	int rc;

	if (!w || !(w->loop = ev_loop_new(EVFLAG_AUTO))) {
		snprintf(err, errlen, "worker %d: cannot create its event loop", id);
		free(w);
		return NULL;
	}
	w->id = id;
	w->max_frame_size = max_frame_size;
	w->kt = kt;
	pthread_mutex_init(&w->lock, NULL);
	ev_async_init(&w->wake, worker_on_wake);
	w->wake.data = w;
	ev_async_start(w->loop, &w->wake);
	if ((rc = pthread_create(&w->thread, NULL, worker_main, w)) != 0) {
		snprintf(err, errlen, "worker %d: pthread_create: %s", id, strerror(rc));
		ev_loop_destroy(w->loop);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return NULL;
	}
	return w;
}

void worker_stop(struct worker *w, struct worker_totals *totals)
{
	struct inbox_msg *m;

	if (worker_post_new(w, INBOX_STOP, -1, NULL) < 0)
		log_error("worker %d: cannot post stop", w->id);
	pthread_join(w->thread, NULL);
	/* Messages that raced with the stop: nobody will handle them now. */
	for (m = w->head; m;) {
		struct inbox_msg *next = m->next;

		if (m->kind == INBOX_CONN)
			close(m->fd);
		else if (m->kind == INBOX_KEYTABLE)
			keytable_unref(m->kt);
		free(m);
		m = next;
	}
	if (totals)
		*totals = w->totals;
	keytable_unref(w->kt);
	ev_loop_destroy(w->loop);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
