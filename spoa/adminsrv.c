/* adminsrv: listener and connections of the administrative endpoints (see adminsrv.h).
 * Main thread, in its libev loop. */
#include "adminsrv.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

/* An output buffer larger than this is freed once sent: one large reply (a long list
 * of in-flight requests) should not pin its memory for the connection's life. */
#define ADMINSRV_OUT_KEEP 65536

struct adminsrv_conn {
	struct adminsrv *srv;
	int fd;
	ev_io rio, wio;
	ev_timer timer;
	unsigned char *in;           /* proto->in_max bytes, allocated with c */
	size_t in_len;
	unsigned char *out;
	size_t out_len, out_off, out_cap;
	int closing;                 /* the protocol is done: close once out is sent */
	int lingering;               /* out sent and FIN sent: input is dropped until EOF */
	int eof;                     /* the peer sends no more */
	struct adminsrv_conn *prev, *next;
	max_align_t state[];         /* the protocol's, proto->state_size bytes */
};

struct adminsrv {
	struct ev_loop *loop;
	const struct adminsrv_proto *proto;
	void *arg;
	struct adminsrv_limits limits;
	ev_io lio;
	ev_timer accept_pause;       /* out of file descriptors: the listener rests */
	ev_tstamp last_refusal_log;
	uint64_t refused;
	struct adminsrv_conn *conns;
	int nconns;
};

static void adminsrv_conn_close(struct adminsrv_conn *c)
{
	struct adminsrv *s = c->srv;

	ev_io_stop(s->loop, &c->rio);
	ev_io_stop(s->loop, &c->wio);
	ev_timer_stop(s->loop, &c->timer);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	free(c->out);
	free(c);
}

int adminsrv_write(struct adminsrv_conn *c, const void *data, size_t len)
{
	if (len > c->out_cap - c->out_len) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		unsigned char *p;

		if (len > SIZE_MAX / 4 - c->out_len)
			return -1;
		while (cap - c->out_len < len)
			cap *= 2;
		if (!(p = realloc(c->out, cap)))
			return -1;
		c->out = p;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, data, len);
	c->out_len += len;
	return 0;
}

/* Sends buffered output. 0: all sent; 1: the socket is full (the write watcher then
 * waits); -1: the peer is gone. Progress restarts the timeout. */
static int adminsrv_conn_flush(struct adminsrv_conn *c)
{
	struct adminsrv *s = c->srv;

	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ev_io_stop(s->loop, &c->rio);
			ev_io_start(s->loop, &c->wio);
			return 1;
		}
		if (n < 0)
			return -1;
		c->out_off += (size_t)n;
		ev_timer_again(s->loop, &c->timer);
	}
	ev_io_stop(s->loop, &c->wio);
	c->out_len = c->out_off = 0;
	if (c->out_cap > ADMINSRV_OUT_KEEP) {
		free(c->out);
		c->out = NULL;
		c->out_cap = 0;
	}
	return 0;
}

/* Closing a socket with unread input makes the kernel send a reset, which can destroy
 * the reply before the peer reads it (a client still sending an over-size request, for
 * instance): half-close instead, and drop input until the peer closes or times out. */
static void adminsrv_conn_linger(struct adminsrv_conn *c)
{
	if (c->eof || shutdown(c->fd, SHUT_WR) < 0) {
		adminsrv_conn_close(c);
		return;
	}
	c->lingering = 1;
	c->in_len = 0;
	ev_io_start(c->srv->loop, &c->rio);
}

/* Sends what is pending, then lets the protocol answer buffered requests one by one,
 * until it needs more input or the socket is full. Closes c when the conversation is
 * over: the caller must not touch c afterwards. */
static void adminsrv_conn_pump(struct adminsrv_conn *c)
{
	struct adminsrv *s = c->srv;
	const struct adminsrv_proto *p = s->proto;

	for (;;) {
		int rc = adminsrv_conn_flush(c);
		ssize_t used;

		if (rc < 0)
			goto close;
		if (rc > 0)
			return;
		if (c->closing) {
			adminsrv_conn_linger(c);
			return;
		}
		if (c->in_len == 0)
			break;
		used = p->input(s->arg, c, c->state, c->in, c->in_len);
		if (used < 0) {
			c->closing = 1;
			continue;
		}
		if (used == 0)
			break;
		memmove(c->in, c->in + used, c->in_len - (size_t)used);
		c->in_len -= (size_t)used;
	}
	/* A full buffer the protocol cannot use would never drain. */
	if (c->eof || c->in_len == p->in_max)
		goto close;
	ev_io_start(s->loop, &c->rio);
	return;
close:
	adminsrv_conn_close(c);
}

static void adminsrv_conn_on_read(struct ev_loop *loop, ev_io *io, int revents)
{
	struct adminsrv_conn *c = io->data;
	ssize_t n;

	(void)revents;
	n = recv(c->fd, c->in + c->in_len, c->srv->proto->in_max - c->in_len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n < 0 || (n == 0 && c->lingering)) {
		if (n < 0)
			log_debug("%s: recv: %s", c->srv->proto->name, strerror(errno));
		adminsrv_conn_close(c);
		return;
	}
	if (c->lingering)
		return;
	/* A peer that half-closes after its requests still gets the replies. */
	if (n == 0) {
		c->eof = 1;
		ev_io_stop(loop, io);
	}
	c->in_len += (size_t)n;
	adminsrv_conn_pump(c);
}

static void adminsrv_conn_on_write(struct ev_loop *loop, ev_io *io, int revents)
{
	(void)loop;
	(void)revents;
	adminsrv_conn_pump(io->data);
}

static void adminsrv_conn_on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct adminsrv_conn *c = t->data;

	(void)loop;
	(void)revents;
	log_debug("%s: closing a connection idle for %.0f s", c->srv->proto->name, t->repeat);
	adminsrv_conn_close(c);
}

static void adminsrv_refuse(struct adminsrv *s, int fd)
{
	s->refused++;
	close(fd);
	/* At most one line a second however hard a peer pushes. */
	if (ev_now(s->loop) - s->last_refusal_log >= 1.0) {
		s->last_refusal_log = ev_now(s->loop);
		log_warn("%s: %d connections open, refusing more (%llu refused so far)",
		         s->proto->name, s->nconns, (unsigned long long)s->refused);
	}
}

static void adminsrv_add(struct adminsrv *s, int fd)
{
	const struct adminsrv_proto *p = s->proto;
	struct adminsrv_conn *c;

	if (s->nconns >= s->limits.max_conns) {
		adminsrv_refuse(s, fd);
		return;
	}
	if (!(c = calloc(1, sizeof(*c) + p->state_size + p->in_max))) {
		log_error("%s: out of memory for a connection", p->name);
		close(fd);
		return;
	}
	c->srv = s;
	c->fd = fd;
	c->in = (unsigned char *)c->state + p->state_size;
	if (p->open)
		p->open(c->state);
	ev_io_init(&c->rio, adminsrv_conn_on_read, fd, EV_READ);
	ev_io_init(&c->wio, adminsrv_conn_on_write, fd, EV_WRITE);
	ev_init(&c->timer, adminsrv_conn_on_timeout);
	c->timer.repeat = s->limits.timeout;
	c->rio.data = c->wio.data = c->timer.data = c;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	ev_io_start(s->loop, &c->rio);
	ev_timer_again(s->loop, &c->timer);
}

static void adminsrv_on_accept_resume(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct adminsrv *s = t->data;

	(void)revents;
	ev_io_start(loop, &s->lio);
}

static void adminsrv_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct adminsrv *s = io->data;
	int fd;

	(void)revents;
	while ((fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
		adminsrv_add(s, fd);
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
		/* The pending connection would wake us again at once: rest instead of spinning. */
		log_warn("%s: accept: %s; pausing new connections for 100 ms", s->proto->name,
		         strerror(errno));
		ev_io_stop(loop, io);
		ev_timer_set(&s->accept_pause, 0.1, 0.);
		ev_timer_start(loop, &s->accept_pause);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		log_warn("%s: accept: %s", s->proto->name, strerror(errno));
	}
}

struct adminsrv *adminsrv_start(struct ev_loop *loop, int fd, const struct adminsrv_proto *proto,
                                void *arg, const struct adminsrv_limits *limits)
{
	struct adminsrv *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->loop = loop;
	s->proto = proto;
	s->arg = arg;
	s->limits = *limits;
	ev_io_init(&s->lio, adminsrv_on_accept, fd, EV_READ);
	ev_init(&s->accept_pause, adminsrv_on_accept_resume);
	s->lio.data = s->accept_pause.data = s;
	ev_io_start(loop, &s->lio);
	return s;
}

void adminsrv_stop(struct adminsrv *s)
{
	while (s->conns)
		adminsrv_conn_close(s->conns);
	ev_io_stop(s->loop, &s->lio);
	ev_timer_stop(s->loop, &s->accept_pause);
	close(s->lio.fd);
	free(s);
}
