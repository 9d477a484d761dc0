/* adminsrv: the plumbing shared by the agent's administrative endpoints (metrics.c,
 * control.c), all on the main thread's loop: a listening socket, a bounded set of
 * connections, each with an input buffer, a growable output buffer and a timeout. The
 * protocol is a callback that consumes one request at a time and appends its reply;
 * the next request is read only once that reply is sent, so that a connection holds
 * at most one reply however many requests a client pipelines. */
#ifndef TALLY_ADMINSRV_H
#define TALLY_ADMINSRV_H

#include <ev.h>
#include <stddef.h>
#include <sys/types.h>

struct adminsrv;
struct adminsrv_conn;

struct adminsrv_proto {
	const char *name;               /* for logs: "metrics", "control" */
	size_t in_max;                  /* input buffered per connection: the largest piece
	                                 * the protocol needs whole */
	size_t state_size;              /* per-connection protocol state, zeroed at accept */
	void (*open)(void *state);      /* prepares a new connection's state; may be NULL */
	/* Consumes at most one request from in[0, len) (len > 0), appending its reply with
	 * adminsrv_write. Returns the bytes used (0: needs more input, and then it wrote
	 * nothing), or -1 to close the connection once what was written is sent. */
	ssize_t (*input)(void *arg, struct adminsrv_conn *c, void *state,
	                 const unsigned char *in, size_t len);
};

struct adminsrv_limits {
	int max_conns;                  /* beyond this, new connections are closed at once */
	double timeout;                 /* seconds a connection may go without a reply sent
	                                 * (or, while one is sent, without progress) */
};

/* Serves the listening socket fd on loop with proto; arg goes to proto->input. proto
 * and arg must outlive the server. Owns fd on success; NULL (fd untouched) when out of
 * memory. */
struct adminsrv *adminsrv_start(struct ev_loop *loop, int fd, const struct adminsrv_proto *proto,
                                void *arg, const struct adminsrv_limits *limits);

/* Closes every connection and the listening socket, and frees s. */
void adminsrv_stop(struct adminsrv *s);

/* Appends len bytes to c's output (sent when input returns). 0, or -1 out of memory. */
int adminsrv_write(struct adminsrv_conn *c, const void *data, size_t len);

#endif
