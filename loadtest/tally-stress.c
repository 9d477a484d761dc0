/* tally-stress: a closed-loop load generator for the tally gateway (usage: --help).
 * For each concurrency level it runs that many HTTP/1.1 clients against the gateway,
 * each sending its next request as soon as the previous one ends, compares every
 * response body byte for byte with the answer fetched directly from the deterministic
 * mock upstream, and then checks that the agent wrote exactly one accounting row per
 * successful request. One thread runs everything: all clients of a level, and the
 * fetch of the expected bodies before it, share one libev loop; the database check
 * (SQLite or PostgreSQL, common/db.h) runs on the same thread between levels. With --hostile-pct a share of the requests tries to
 * get around the meter (a stream that turns usage off, one sent chunked, one whose
 * upstream answers an error, Responses requests whose echoed tools, instructions and
 * metadata surround the usage, a usage class the card does not price: those last rows
 * must bill exactly what the upstream reported), and with --forge every response's id gets a forged
 * zero-usage record sent to the agent's records port ahead of the real one: the level
 * still passes only if every row is there with the usage the upstream reported.
 * --url given once per node spreads a level's clients evenly over the nodes' gateways
 * (--keys: each gateway's clients send a key of their own), and the check then also
 * wants every node's counters balanced; --refused-status
 * counts a limit's refusals (429) apart from errors, the client backing off meanwhile.
 * --end-users N makes two requests in three name one of N end users, by the X-Tally-User
 * header or in the body, and the check then wants each row's end user to be the one its
 * request named and end_user_daily to hold the rows' sums. --tag-sets N makes requests
 * send X-Tally-Tags with one of N sets of tags or none, and the check then wants each
 * row's tags to be the canonical text of its request's, tag_daily to hold the rows'
 * sums per tag and key, tag_total_daily per tag, and request_tags the rows' tags one
 * for one.
 * Allocation failure aborts: a test tool that cannot allocate has nothing better to do. */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <ev.h>
#include <http_parser.h>

#include "db.h"

#define ST_PATH        "/v1/chat/completions"
#define ST_RESPONSES   "/v1/responses"
#define ST_LEVELS_MAX  64
#define ST_RID_MAX     128          /* longer X-Request-Id values are a protocol error */
#define ST_STATUS_MAX  1000         /* http_parser accepts 3-digit status codes */
#define ST_IN_CHUNK    65536
#define ST_SQL_CHUNK   500          /* bound parameters per IN (...) query */
#define ST_SETTLE_S    10.0         /* how long the accounting check waits for the agent */
#define ST_TARGETS_MAX 8            /* --url given several times: one gateway per node */
#define ST_NODES_MAX   64           /* accounting rows (nodes) reported per level */
#define ST_END_USERS   8            /* --end-users' default */
#define ST_END_USERS_MAX 64
#define ST_END_USER_LEN 256         /* the longest end user id the gateway keeps */
#define ST_TAG_SETS    3            /* --tag-sets' default and most */

/* The hostile shapes come last: ESCAPE asks for no usage, CHUNKED sends its body without
 * a Content-Length, ERROR gets a 429 from the upstream on a stream that was amended.
 * From SHAPE_BILLED on, each row must bill the upstream's usage exactly (issue 28):
 * FORGED (unary /v1/responses) echoes a tool schema holding a forged usage object, a
 * long tool description and 8 x 500 characters of metadata; NAMED (a Responses stream)
 * echoes metadata naming another model between 2 KB of instructions and a 3.5 KB tool
 * description; PADDED (a Responses stream) ends in 16 x 500 characters of metadata;
 * UNPRICED (unary chat) reports cache writes, a class the usual cards leave unpriced. */
enum { SHAPE_UNARY, SHAPE_STREAM, SHAPE_ESCAPE, SHAPE_CHUNKED, SHAPE_ERROR, SHAPE_FORGED,
       SHAPE_NAMED, SHAPE_PADDED, SHAPE_UNPRICED, SHAPE_N };
#define SHAPE_HOSTILE SHAPE_ESCAPE
#define SHAPE_BILLED  SHAPE_FORGED
static const char *const shape_names[SHAPE_N] = { "unary", "stream", "escape", "chunked",
						  "error", "forged", "named", "padded",
						  "unpriced" };
static const bool shape_stream[SHAPE_N] = { false, true, true, true, true, false, true, true,
					    false };
/* Whether shape s goes to /v1/responses (the echo attacks), not to chat completions. */
static bool shape_responses(int s)
{
	return s >= SHAPE_BILLED && s != SHAPE_UNPRICED;
}

/* The usage the BILLED shapes have the mock report (its knobs), and the model NAMED's
 * metadata names (another model of the usual seed, priced otherwise). */
#define ST_BILLED_PROMPT     50000
#define ST_BILLED_COMPLETION 20000
#define ST_NAMED_MODEL       "mock-claude"

enum err_kind { ERR_CONNECT, ERR_TIMEOUT, ERR_STATUS, ERR_MISMATCH, ERR_SHORT_READ,
		ERR_PROTOCOL, ERR_N };
static const char *const err_names[ERR_N] = {
	"connect", "timeout", "status", "mismatch", "short_read", "protocol"
};
/* A request's outcome: an err_kind, or one of these. */
enum { OUT_OK = ERR_N, OUT_REFUSED };

struct buf {
	char *p;
	size_t len, cap;
};

#define ST_HEADERS_MAX 8

struct opts {
	const char *urls[ST_TARGETS_MAX];
	int nurls;
	const char *expect_url, *key, *db, *model;
	const char *keys[ST_TARGETS_MAX];   /* --keys: keys[t] for urls[t] */
	int nkeys;
	char keybuf[1024];                  /* what keys[] point into */
	const char *headers[ST_HEADERS_MAX];   /* "Name: value", gateway requests only */
	int nheaders;
	int levels[ST_LEVELS_MAX], nlevels;
	double duration, timeout, connect_timeout;
	long requests, stream_pct, hostile_pct, frames, frame_delay_ms, body_bytes, max_tokens;
	long end_users;                 /* named by two requests in three; 0: none */
	long tag_sets;                  /* sent by N requests in N + 1; 0: none */
	const char *forge;              /* the agent's records address: forge records there */
	int refused_status;             /* 0: none; else a refusal, not an error */
	long refused_pause_ms;          /* a refused client waits this long, as one backing off */
	bool keepalive, json, allow_drops;
};

/* Where requests go and what they look like there: the gateway, or the mock directly. */
struct target {
	struct sockaddr_storage addr;
	socklen_t addrlen;
	long end_users;             /* the end users its requests name (eu_variant) */
	long tag_sets;              /* the sets of tags its requests send (tg_variant) */
	/* complete request bytes per shape and variant (an end user's and a tags' variant,
	 * target_variant) */
	struct buf *req[SHAPE_N];
	int status[SHAPE_N];        /* the status each shape's answer has */
};

/* What every response of one shape must be, fetched from the mock. */
struct expected {
	struct buf body;
	unsigned long long events;      /* "data: " occurrences */
	unsigned long long tokens;      /* usage.completion_tokens (Responses: output_tokens) */
	/* A Responses answer's id: the mock mixes in the X-Request-Id the gateway sends, so
	 * the bytes where its hex part stands (1 in any, as long as body; NULL: none) may be
	 * any hex digits. */
	unsigned char *any;
};

struct dvec {
	double *v;
	size_t n, cap;
};

/* One level (or one expected-body fetch): budget, clients and results. */
struct run {
	struct ev_loop *loop;
	const struct target *tgts;      /* client i sends to tgts[i % ntgts] */
	int ntgts;
	struct expected *exp;           /* NULL: record into exp_out instead of comparing */
	struct buf *exp_out;
	int fixed_shape;                /* -1: choose by request index */
	long stream_pct, hostile_pct;
	int forge_fd;                   /* UDP to the records port; -1: no forging */
	struct sockaddr_storage forge_addr;
	socklen_t forge_addrlen;
	unsigned long long forged;
	long budget;                    /* requests to issue; -1: until deadline */
	double deadline;
	long issued;
	int active;
	bool keepalive;
	double timeout, connect_timeout;
	int refused_status;
	double refused_pause;
	/* results; events and tokens of a success are those of its expected body, which
	 * it equals byte for byte; bytes are all bytes received, headers included */
	double t0, t1;
	unsigned long long ok, ok_streams, bytes, events, tokens;
	unsigned long long errors[ERR_N], status[ST_STATUS_MAX], no_id, refused;
	unsigned long long ok_tgt[ST_TARGETS_MAX];
	struct dvec lat, fb;
	char **ids;
	size_t nids, capids;
	int *eus, *tgs;                 /* each id's end user and tags variants */
	size_t capeus;
	unsigned long long eu_sent[3];  /* successes with an id, by enum eu_kind */
	unsigned long long tg_sent[ST_TAG_SETS + 1];   /* the same, by tags variant */
	char **bids;                    /* ids of the BILLED shapes' successes */
	size_t nbids, capbids;
};

struct client {
	struct run *run;
	const struct target *tgt;
	int tix;                        /* tgt's index in run->tgts */
	int fd;
	bool connected, paused;
	ev_io io;
	ev_timer timer;
	http_parser parser;
	int shape, variant, tg;         /* tg: tags variant (variant holds it too) */
	const struct buf *out;
	size_t out_off;
	double t_start, t_first;
	size_t body_pos;
	bool mismatch, complete;
	/* header capture: only X-Request-Id is kept */
	char field[16];
	size_t field_len;
	bool field_overflow, in_value, is_rid;
	char rid[ST_RID_MAX];
	size_t rid_len;
};

static const char *prog = "tally-stress";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

static void buf_add(struct buf *b, const void *data, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof tmp)
		die("request line too long");
	buf_add(b, tmp, (size_t)n);
}

static void dvec_push(struct dvec *d, double x)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 1024;
		d->v = xrealloc(d->v, d->cap * sizeof *d->v);
	}
	d->v[d->n++] = x;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Occurrences of needle in b; *last (if not NULL) gets the byte after the last one. */
static unsigned long long count_sub(const struct buf *b, const char *needle, const char **last)
{
	size_t k = strlen(needle);
	unsigned long long c = 0;
	if (last)
		*last = NULL;
	for (const char *q = b->p; b->len && (q = memmem(q, b->len - (size_t)(q - b->p), needle, k));
	     q += k) {
		c++;
		if (last)
			*last = q + k;
	}
	return c;
}

/* ---- end users -------------------------------------------------------------------- */

/* How a request names its end user. Variant 0 names none; variant 1 + 2j names end user
 * j by the X-Tally-User header, 2 + 2j in the body. */
enum eu_kind { EU_NONE, EU_HEADER, EU_BODY };
static const char *const eu_kind_names[3] = { "none", "header", "body" };

/* Request k's variant among n end users: none, the header and the body in turn, the end
 * user changing every three requests. */
static int eu_variant(long k, long n)
{
	if (n == 0 || k % 3 == 0)
		return 0;
	return 1 + 2 * (int)((k / 3) % n) + (k % 3 == 2);
}

static enum eu_kind eu_kind(int variant)
{
	return variant == 0 ? EU_NONE : variant % 2 ? EU_HEADER : EU_BODY;
}

/* End user j's id into out (ST_END_USER_LEN + 1 bytes), in turn of each form clients
 * send: a plain one, one with spaces, quotes and a letter outside ASCII, an e-mail
 * address, and one of the longest length the gateway keeps. */
static void eu_id(int j, char *out)
{
	int n;
	switch (j % 4) {
	case 0: snprintf(out, ST_END_USER_LEN + 1, "stress-%d", j); break;
	case 1: snprintf(out, ST_END_USER_LEN + 1, "stress %d \"Zo\xc3\xab\"", j); break;
	case 2: snprintf(out, ST_END_USER_LEN + 1, "stress-%d@example.com", j); break;
	default:
		n = snprintf(out, ST_END_USER_LEN + 1, "stress-%d-", j);
		memset(out + n, 'x', (size_t)(ST_END_USER_LEN - n));
		out[ST_END_USER_LEN] = '\0';
	}
}

/* ---- tags ------------------------------------------------------------------------- */

/* The X-Tally-Tags values requests send, as clients may write them (spaces and tabs
 * around tags, any order), and the canonical text the row must keep. A tag is in several
 * sets, so that tag_daily sums rows of different sets in one group. */
static const struct tag_set {
	const char *sent, *canon;
} tag_sets[ST_TAG_SETS] = {
	{ "env=stress", "env=stress" },
	{ "team=b-1, env=stress", "env=stress,team=b-1" },
	{ "z.k=V:1/a@b+c,\tfeature=search , env=load", "env=load,feature=search,z.k=V:1/a@b+c" },
};

/* Request k's tags variant among n sets: 0 sends none, 1 + j set j; in turn every two
 * requests, so not in step with the end users' three. */
static int tg_variant(long k, long n)
{
	return n == 0 ? 0 : (int)((k / 2) % (n + 1));
}

/* ---- request building ------------------------------------------------------------ */

static void parse_url(const char *url, struct target *t, char *hostport, size_t hpcap)
{
	const char *pfx = "http://";
	if (strncmp(url, pfx, strlen(pfx)) != 0)
		die("%s: only http://HOST:PORT is supported", url);
	const char *hp = url + strlen(pfx);
	size_t n = strcspn(hp, "/");
	if (hp[n] && strcmp(hp + n, "/") != 0)
		die("%s: no path allowed (requests go to " ST_PATH ")", url);
	if (n == 0 || n >= hpcap)
		die("%s: bad host", url);
	memcpy(hostport, hp, n);
	hostport[n] = 0;
	char host[256];
	const char *colon = strrchr(hostport, ':');
	if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof host)
		die("%s: HOST:PORT required", url);
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = 0;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {   /* [::1] */
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = 0;
	}
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 1 || port > 65535)
		die("%s: bad port", url);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc != 0)
		die("%s: %s", url, gai_strerror(rc));
	memcpy(&t->addr, ai->ai_addr, ai->ai_addrlen);
	t->addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
}

static void buf_fill(struct buf *b, char c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf_add(b, &c, 1);
}

/* A Responses request that echoes client text around its usage (see SHAPE_FORGED); eu
 * is the members naming the end user, after the model. */
static void echo_body(struct buf *b, const struct opts *o, int s, const char *eu)
{
	int values = s == SHAPE_FORGED ? 8 : s == SHAPE_PADDED ? 16 : 0;

	buf_printf(b, "{\"model\":\"%s\"%s,\"input\":\"hi\"%s", o->model, eu,
		   s == SHAPE_FORGED ? "" : ",\"stream\":true");
	if (s == SHAPE_NAMED) {
		buf_printf(b, ",\"instructions\":\"");
		buf_fill(b, 'i', 2000);
		buf_printf(b, "\"");
	}
	if (s != SHAPE_PADDED) {
		buf_printf(b, ",\"tools\":[");
		if (s == SHAPE_FORGED)
			buf_printf(b, "{\"type\":\"function\",\"name\":\"lookup\",\"parameters\":"
				   "{\"type\":\"object\",\"usage\":{\"input_tokens\":1,"
				   "\"output_tokens\":1}}},");
		buf_printf(b, "{\"type\":\"function\",\"name\":\"pad\",\"description\":\"");
		buf_fill(b, 'd', s == SHAPE_FORGED ? 1500 : 3500);
		buf_printf(b, "\",\"parameters\":{\"type\":\"object\"}}]");
	}
	buf_printf(b, ",\"metadata\":{");
	if (s == SHAPE_NAMED)
		buf_printf(b, "\"model\":\"" ST_NAMED_MODEL "\"");
	for (int i = 0; i < values; i++) {
		buf_printf(b, "%s\"k%d\":\"", i ? "," : "", i);
		buf_fill(b, (char)('a' + i), 500);
		buf_printf(b, "\"");
	}
	buf_printf(b, "}}");
}

/* The body of shape s, naming end user eu_user (-1: none). The mock is sent what the
 * gateway sends it: a stream that did not ask for usage has been amended to ask for it.
 * Chat names the end user as "user"; the Responses API as "safety_identifier", which the
 * mock does not echo (its "user" it does, which the expected answer would not hold). */
static void shape_body(struct buf *b, const struct opts *o, int s, bool for_mock, int eu_user)
{
	static const char *const tail[SHAPE_N] = {
		[SHAPE_UNARY] = "",
		[SHAPE_STREAM] = ",\"stream\":true,\"stream_options\":{\"include_usage\":true}",
		[SHAPE_ESCAPE] = ",\"stream\":true,\"stream_options\":{\"include_usage\":false}",
		[SHAPE_CHUNKED] = ",\"stream\":true",
		[SHAPE_ERROR] = ",\"stream\":true",
		[SHAPE_UNPRICED] = "",
	};
	const char *t = for_mock && s >= SHAPE_HOSTILE && s < SHAPE_BILLED ? tail[SHAPE_STREAM]
									     : tail[s];
	char id[ST_END_USER_LEN + 1], eu[2 * ST_END_USER_LEN + 32] = "";

	if (eu_user >= 0) {
		/* the ids hold no control characters: quotes and backslashes are all to escape */
		size_t n = (size_t)snprintf(eu, sizeof eu, ",\"%s\":\"",
					    shape_responses(s) ? "safety_identifier" : "user");
		eu_id(eu_user, id);
		for (const char *p = id; *p; p++) {
			if (*p == '"' || *p == '\\')
				eu[n++] = '\\';
			eu[n++] = *p;
		}
		memcpy(eu + n, "\"", 2);
	}
	b->len = 0;
	if (shape_responses(s)) {
		echo_body(b, o, s, eu);
		return;
	}
	buf_printf(b, "{\"model\":\"%s\"%s,\"messages\":[{\"role\":\"user\","
		   "\"content\":\"hi\"}],\"max_tokens\":%ld%s}", o->model, eu, o->max_tokens, t);
}

/* The variants of t's requests: end user variant eu of tags variant tg is
 * target_variant(t, eu, tg); their number is target_variant(t, 0, tag_sets + 1). */
static int target_variant(const struct target *t, int eu, int tg)
{
	return eu + (1 + 2 * (int)t->end_users) * tg;
}

/* Both targets get the same body and knob headers, so that the mock's bytes match. The
 * gateway's requests come in each end user and tags variant, the mock's in none. */
static void build_target(struct target *t, const struct opts *o, const char *url,
			 const char *bearer, int extra_headers)
{
	char hostport[300], id[ST_END_USER_LEN + 1];
	parse_url(url, t, hostport, sizeof hostport);
	if (bearer && strpbrk(bearer, "\r\n"))
		die("a credential with a line break would inject headers");
	t->end_users = extra_headers ? o->end_users : 0;
	t->tag_sets = extra_headers ? o->tag_sets : 0;
	int neu = 1 + 2 * (int)t->end_users, nv = target_variant(t, 0, (int)t->tag_sets + 1);
	struct buf body = { 0 };
	for (int s = 0; s < SHAPE_N; s++) {
		t->req[s] = xrealloc(NULL, (size_t)nv * sizeof *t->req[s]);
		memset(t->req[s], 0, (size_t)nv * sizeof *t->req[s]);
		t->status[s] = s == SHAPE_ERROR ? 429 : 200;
		for (int v = 0; v < nv; v++) {
			bool chunked = s == SHAPE_CHUNKED && extra_headers;
			enum eu_kind kind = eu_kind(v % neu);
			int tg = v / neu;
			shape_body(&body, o, s, !extra_headers, kind == EU_BODY ? (v % neu - 1) / 2 : -1);
			int n = (int)body.len;
			struct buf *b = &t->req[s][v];
			buf_printf(b, "POST %s HTTP/1.1\r\nHost: %s\r\n",
				   shape_responses(s) ? ST_RESPONSES : ST_PATH, hostport);
			if (bearer)
				buf_printf(b, "Authorization: Bearer %s\r\n", bearer);
			for (int h = 0; extra_headers && h < o->nheaders; h++)
				buf_printf(b, "%s\r\n", o->headers[h]);
			if (kind == EU_HEADER) {
				eu_id((v % neu - 1) / 2, id);
				buf_printf(b, "X-Tally-User: %s\r\n", id);
			}
			if (tg > 0)
				buf_printf(b, "X-Tally-Tags: %s\r\n", tag_sets[tg - 1].sent);
			if (chunked)
				buf_printf(b, "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n");
			else
				buf_printf(b, "Content-Type: application/json\r\nContent-Length: %d\r\n", n);
			if (o->frames >= 0)
				buf_printf(b, "x-mock-frames: %ld\r\n", o->frames);
			if (o->frame_delay_ms >= 0)
				buf_printf(b, "x-mock-frame-delay-ms: %ld\r\n", o->frame_delay_ms);
			if (s == SHAPE_UNARY && o->body_bytes >= 0)
				buf_printf(b, "x-mock-body-bytes: %ld\r\n", o->body_bytes);
			if (s == SHAPE_ERROR)
				buf_printf(b, "x-mock-status: 429\r\n");
			if (s >= SHAPE_BILLED)
				buf_printf(b, "x-mock-prompt-tokens: %d\r\nx-mock-completion-tokens: %d\r\n",
					   ST_BILLED_PROMPT, ST_BILLED_COMPLETION);
			if (s == SHAPE_UNPRICED)
				buf_printf(b, "x-mock-cache-write-tokens: 1000\r\n");
			if (!o->keepalive)
				buf_printf(b, "Connection: close\r\n");
			if (chunked) {
				buf_printf(b, "\r\n%x\r\n", n / 2);
				buf_add(b, body.p, (size_t)(n / 2));
				buf_printf(b, "\r\n%x\r\n", n - n / 2);
				buf_add(b, body.p + n / 2, (size_t)(n - n / 2));
				buf_printf(b, "\r\n0\r\n\r\n");
			} else {
				buf_printf(b, "\r\n");
				buf_add(b, body.p, body.len);
			}
		}
	}
	free(body.p);
}

/* Frees what build_target made. */
static void target_free(struct target *t)
{
	for (int s = 0; s < SHAPE_N; s++) {
		for (int v = 0; t->req[s] && v < target_variant(t, 0, (int)t->tag_sets + 1); v++)
			free(t->req[s][v].p);
		free(t->req[s]);
	}
}

/* ---- one client ------------------------------------------------------------------- */

static void client_start(struct client *c);

/* Spreads streams evenly over the request indexes: request k is a stream when the
 * running share floor(k * pct / 100) steps up at k. */
static int shape_of(const struct run *r, long k)
{
	if (r->fixed_shape >= 0)
		return r->fixed_shape;
	/* hostile requests the same way, taking the hostile shapes in turn */
	if ((k + 1) * r->hostile_pct / 100 > k * r->hostile_pct / 100)
		return SHAPE_HOSTILE + (int)((k * r->hostile_pct / 100) % (SHAPE_N - SHAPE_HOSTILE));
	return (k + 1) * r->stream_pct / 100 > k * r->stream_pct / 100 ? SHAPE_STREAM : SHAPE_UNARY;
}

static void client_close(struct client *c)
{
	if (c->fd < 0)
		return;
	ev_io_stop(c->run->loop, &c->io);
	close(c->fd);
	c->fd = -1;
	c->connected = false;
}

static void ids_add(char ***ids, size_t *n, size_t *cap, const char *id)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		*ids = xrealloc(*ids, *cap * sizeof **ids);
	}
	if (!((*ids)[*n] = strdup(id)))
		abort();
	(*n)++;
}

static void run_add_success(struct run *r, const struct client *c, double t)
{
	const struct expected *e = &r->exp[c->shape];
	r->ok_streams += shape_stream[c->shape];
	r->events += e->events;
	r->tokens += e->tokens;
	dvec_push(&r->lat, t - c->t_start);
	dvec_push(&r->fb, c->t_first - c->t_start);
	if (!c->rid_len) {
		r->no_id++;     /* makes the accounting check fail: the row cannot be found */
		return;
	}
	if (r->nids == r->capeus) {
		r->capeus = r->capeus ? r->capeus * 2 : 1024;
		r->eus = xrealloc(r->eus, r->capeus * sizeof *r->eus);
		r->tgs = xrealloc(r->tgs, r->capeus * sizeof *r->tgs);
	}
	r->eus[r->nids] = c->variant % (1 + 2 * (int)c->tgt->end_users);
	r->tgs[r->nids] = c->tg;
	r->eu_sent[eu_kind(r->eus[r->nids])]++;
	r->tg_sent[c->tg]++;
	ids_add(&r->ids, &r->nids, &r->capids, c->rid);
	if (c->shape >= SHAPE_BILLED)
		ids_add(&r->bids, &r->nbids, &r->capbids, c->rid);
}

/* Issues the client's next request, or retires it when the budget is spent. */
static void client_next(struct client *c, double t)
{
	struct run *r = c->run;
	bool more = r->budget >= 0 ? r->issued < r->budget : t < r->deadline;
	if (more) {
		client_start(c);
		return;
	}
	client_close(c);
	if (--r->active == 0)
		ev_break(r->loop, EVBREAK_ONE);
}

/* Ends the current request with its outcome, then goes on with the next one: after a
 * refusal only once the pause is over, from the timer. */
static void client_finish(struct client *c, int out)
{
	struct run *r = c->run;
	double t = now_s();
	ev_timer_stop(r->loop, &c->timer);
	if (out == OUT_REFUSED) {
		r->refused++;
	} else if (out != OUT_OK) {
		r->errors[out]++;
		if (out == ERR_STATUS)
			r->status[c->parser.status_code]++;
	} else {
		r->ok++;
		r->ok_tgt[c->tix]++;
		if (r->exp)     /* a level's success, not a fetch */
			run_add_success(r, c, t);
	}
	r->t1 = t;
	ev_io_stop(r->loop, &c->io);
	if ((out != OUT_OK && out != OUT_REFUSED) || !r->keepalive ||
	    !http_should_keep_alive(&c->parser))
		client_close(c);
	if (out == OUT_REFUSED && r->refused_pause > 0) {
		c->paused = true;
		ev_timer_set(&c->timer, r->refused_pause, 0);
		ev_timer_start(r->loop, &c->timer);
		return;
	}
	client_next(c, t);
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
	struct client *c = p->data;
	if (c->in_value) {      /* a new header begins */
		c->in_value = false;
		c->field_len = 0;
		c->field_overflow = false;
	}
	if (c->field_len + n >= sizeof c->field) {
		c->field_overflow = true;
		return 0;
	}
	memcpy(c->field + c->field_len, at, n);
	c->field_len += n;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	struct client *c = p->data;
	if (!c->in_value) {
		c->in_value = true;
		c->field[c->field_len] = 0;
		c->is_rid = !c->field_overflow && strcasecmp(c->field, "x-request-id") == 0;
		if (c->is_rid)
			c->rid_len = 0;     /* a repeated header replaces the first */
	}
	if (!c->is_rid)
		return 0;
	if (c->rid_len + n >= sizeof c->rid)
		return -1;              /* longer than any id HAProxy makes: reject */
	memcpy(c->rid + c->rid_len, at, n);
	c->rid_len += n;
	c->rid[c->rid_len] = 0;
	return 0;
}

/* Bodies are compared as they arrive, so that no response is held in memory. */
static int on_body(http_parser *p, const char *at, size_t n)
{
	struct client *c = p->data;
	struct run *r = c->run;
	if (p->status_code != (unsigned)c->tgt->status[c->shape])
		return 0;
	if (!r->exp) {
		buf_add(r->exp_out, at, n);
		return 0;
	}
	const struct expected *x = &r->exp[c->shape];
	const struct buf *e = &x->body;
	if (c->mismatch || c->body_pos + n > e->len) {
		c->mismatch = true;
	} else {
		for (size_t i = 0; i < n && !c->mismatch; i++) {
			size_t pos = c->body_pos + i;
			if (x->any && x->any[pos] ? !isxdigit((unsigned char)at[i]) : at[i] != e->p[pos])
				c->mismatch = true;
		}
	}
	c->body_pos += n;
	return 0;
}

/* Where a Responses answer's id (its hex part, after "resp_mock") stands in its body. */
static void expected_ids(struct expected *x)
{
	static const char key[] = "\"id\":\"resp_mock";
	const char *p = x->body.p, *end = p + x->body.len, *id;
	size_t len = 0;
	if (!(id = memmem(p, x->body.len, key, sizeof(key) - 1)))
		return;
	id += sizeof(key) - 1;
	while (id + len < end && isxdigit((unsigned char)id[len]))
		len++;
	if (!len || !(x->any = calloc(x->body.len, 1)))
		return;
	for (p = x->body.p; (p = memmem(p, (size_t)(end - p), id, len)); p += len)
		memset(x->any + (p - x->body.p), 1, len);
}

/* A record in the log-format's shape for the response's id, claiming no usage, with a
 * MAC that is not HAProxy's; every tenth also one for an id of its own claiming a
 * million tokens. The agent must refuse both. */
static void forge_records(struct client *c)
{
	static const char mac[] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
	struct run *r = c->run;
	char line[512], id[ST_RID_MAX + 32];
	int n;

	if (r->forge_fd < 0 || !c->rid_len)
		return;
	for (int fresh = 0; fresh < 1 + (r->forged % 10 == 0); fresh++) {
		if (fresh)
			snprintf(id, sizeof id, "forged-%llu", r->forged);
		else
			snprintf(id, sizeof id, "%s", c->rid);
		n = snprintf(line, sizeof line, "tally2 %s - - %s %lld 123 200 342 555 3 0 0 2 5 -- "
			     "be_mock_openai allow 1 mock-gpt mock-openai 0 - - mock-gpt %s 0 - - - - - "
			     "- -", mac, id, (long long)time(NULL), fresh ? "1000000" : "0");
		if (n > 0 && (size_t)n < sizeof line &&
		    sendto(r->forge_fd, line, (size_t)n, 0, (const struct sockaddr *)&r->forge_addr,
			   r->forge_addrlen) == n)
			r->forged++;
	}
}

static int on_headers_complete(http_parser *p)
{
	forge_records(p->data);
	return 0;
}

static int on_message_complete(http_parser *p)
{
	struct client *c = p->data;
	c->complete = true;
	http_parser_pause(p, 1);    /* one response per request: no pipelining */
	return 0;
}

static const http_parser_settings parser_settings = {
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

static int response_outcome(struct client *c)
{
	if (c->run->refused_status && c->parser.status_code == (unsigned)c->run->refused_status)
		return OUT_REFUSED;
	if (c->parser.status_code != (unsigned)c->tgt->status[c->shape])
		return ERR_STATUS;
	if (c->run->exp && (c->mismatch || c->body_pos != c->run->exp[c->shape].body.len))
		return ERR_MISMATCH;
	return OUT_OK;
}

static void client_read(struct client *c)
{
	char in[ST_IN_CHUNK];
	ssize_t n = recv(c->fd, in, sizeof in, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0) {
		client_finish(c, ERR_SHORT_READ);
		return;
	}
	if (n > 0 && c->t_first == 0)
		c->t_first = now_s();
	c->run->bytes += (unsigned long long)n;
	/* n == 0 tells the parser about EOF, which ends a close-delimited body */
	size_t used = http_parser_execute(&c->parser, &parser_settings, in, (size_t)n);
	enum http_errno he = HTTP_PARSER_ERRNO(&c->parser);
	if (c->complete)
		client_finish(c, response_outcome(c));
	else if (n == 0)
		client_finish(c, ERR_SHORT_READ);
	else if (he != HPE_OK || used != (size_t)n)
		client_finish(c, ERR_PROTOCOL);
}

static void client_write(struct client *c)
{
	while (c->out_off < c->out->len) {
		ssize_t n = send(c->fd, c->out->p + c->out_off, c->out->len - c->out_off,
				 MSG_NOSIGNAL);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0) {
			client_finish(c, ERR_SHORT_READ);
			return;
		}
		c->out_off += (size_t)n;
	}
	ev_io_stop(c->run->loop, &c->io);
	ev_io_set(&c->io, c->fd, EV_READ);
	ev_io_start(c->run->loop, &c->io);
}

static void client_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	struct client *c = w->data;
	if (!c->connected && (revents & EV_WRITE)) {
		int soerr = 0;
		socklen_t len = sizeof soerr;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
			client_finish(c, ERR_CONNECT);
			return;
		}
		c->connected = true;
		ev_timer_stop(c->run->loop, &c->timer);
		double left = c->t_start + c->run->timeout - now_s();
		ev_timer_set(&c->timer, left > 0.001 ? left : 0.001, 0);
		ev_timer_start(c->run->loop, &c->timer);
	}
	if (revents & EV_WRITE)
		client_write(c);
	else if (revents & EV_READ)
		client_read(c);
}

static void client_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	struct client *c = w->data;
	if (c->paused) {
		c->paused = false;
		client_next(c, now_s());
		return;
	}
	client_finish(c, c->connected ? ERR_TIMEOUT : ERR_CONNECT);
}

static int client_connect(struct client *c)
{
	const struct target *t = c->tgt;
	int one = 1;
	c->fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	/* small requests must leave at once, not wait for Nagle */
	if (setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
		goto fail;
	if (connect(c->fd, (const struct sockaddr *)&t->addr, t->addrlen) < 0 &&
	    errno != EINPROGRESS)
		goto fail;
	return 0;
fail:
	close(c->fd);
	c->fd = -1;
	return -1;
}

static void client_start(struct client *c)
{
	struct run *r = c->run;
	long k = r->issued++;
	c->shape = shape_of(r, k);
	c->tg = tg_variant(k, c->tgt->tag_sets);
	c->variant = target_variant(c->tgt, eu_variant(k, c->tgt->end_users), c->tg);
	c->out = &c->tgt->req[c->shape][c->variant];
	c->out_off = 0;
	c->t_start = now_s();
	c->t_first = 0;
	c->body_pos = 0;
	c->mismatch = c->complete = false;
	c->field_len = c->rid_len = 0;
	c->field_overflow = c->in_value = c->is_rid = false;
	http_parser_init(&c->parser, HTTP_RESPONSE);
	c->parser.data = c;
	if (c->fd < 0 && client_connect(c) < 0) {
		/* reported from the timer, not from here: finishing now would recurse into
		 * the next request, as deep as the budget */
		ev_timer_set(&c->timer, 0, 0);
		ev_timer_start(r->loop, &c->timer);
		return;
	}
	ev_timer_set(&c->timer, c->connected ? r->timeout : r->connect_timeout, 0);
	ev_timer_start(r->loop, &c->timer);
	ev_io_set(&c->io, c->fd, EV_WRITE);
	ev_io_start(r->loop, &c->io);
}

/* Runs nclients closed-loop clients until the run's budget or deadline is spent. */
static void run_exec(struct run *r, int nclients, double duration)
{
	struct client *cs = calloc((size_t)nclients, sizeof *cs);
	if (!cs)
		abort();
	/* the loop's clock stood still during the accounting wait; timers start from it */
	ev_now_update(r->loop);
	r->t0 = r->t1 = now_s();
	r->deadline = r->t0 + duration;
	for (int i = 0; i < nclients; i++) {
		struct client *c = &cs[i];
		c->run = r;
		c->tix = i % r->ntgts;
		c->tgt = &r->tgts[c->tix];
		c->fd = -1;
		ev_init(&c->io, client_io_cb);
		ev_init(&c->timer, client_timer_cb);
		c->io.data = c->timer.data = c;
	}
	for (int i = 0; i < nclients && (r->budget < 0 || r->issued < r->budget); i++) {
		r->active++;
		client_start(&cs[i]);
	}
	if (r->active)
		ev_run(r->loop, 0);
	free(cs);
}

static void run_free(struct run *r)
{
	for (size_t i = 0; i < r->nids; i++)
		free(r->ids[i]);
	free(r->ids);
	free(r->eus);
	free(r->tgs);
	for (size_t i = 0; i < r->nbids; i++)
		free(r->bids[i]);
	free(r->bids);
	free(r->lat.v);
	free(r->fb.v);
}

static void run_init(struct run *r, struct ev_loop *loop, const struct opts *o,
		     const struct target *t, int nt)
{
	memset(r, 0, sizeof *r);
	r->loop = loop;
	r->tgts = t;
	r->ntgts = nt;
	r->fixed_shape = -1;
	r->stream_pct = o->stream_pct;
	r->hostile_pct = o->hostile_pct;
	r->forge_fd = -1;
	r->budget = o->requests > 0 ? o->requests : -1;
	r->keepalive = o->keepalive;
	r->timeout = o->timeout;
	r->connect_timeout = o->connect_timeout;
	r->refused_status = o->refused_status;
	r->refused_pause = (double)o->refused_pause_ms / 1000.0;
}

/* Takes the usage event out of an event stream, as the gateway does for a client that
 * did not ask for it. */
static void strip_usage_event(struct buf *b)
{
	const char *u = b->len ? memmem(b->p, b->len, "\"usage\":{", 9) : NULL;
	if (!u)
		return;
	const char *start = u, *stop = memmem(u, b->len - (size_t)(u - b->p), "\n\n", 2);
	while (start > b->p && !(start[-1] == '\n' && start[0] == 'd'))
		start--;
	if (!stop)
		return;
	stop += 2;
	memmove((char *)start, stop, b->len - (size_t)(stop - b->p));
	b->len -= (size_t)(stop - start);
}

/* The mock's answer for each shape, fetched directly: what every response must be. */
static void fetch_expected(struct ev_loop *loop, const struct opts *o, const struct target *mock,
			   struct expected exp[SHAPE_N])
{
	for (int s = 0; s < (o->hostile_pct ? SHAPE_N : SHAPE_HOSTILE); s++) {
		struct run r;
		run_init(&r, loop, o, mock, 1);
		r.fixed_shape = s;
		r.budget = 1;
		r.exp_out = &exp[s].body;
		exp[s].body.len = 0;
		run_exec(&r, 1, 0);
		if (r.ok != 1) {
			for (int e = 0; e < ERR_N; e++)
				if (r.errors[e])
					die("expected %s body from %s: %s%s", shape_names[s],
					    o->expect_url, err_names[e],
					    e == ERR_STATUS ? " (not the status expected)" : "");
		}
		const char *last;
		exp[s].events = count_sub(&exp[s].body, "data: ", NULL);
		exp[s].tokens = 0;
		/* The last count of the answer is its usage's: nothing the mock writes after it
		 * (metadata values here) holds these names. */
		count_sub(&exp[s].body, shape_responses(s)
			  ? "\"output_tokens\":" : "\"completion_tokens\":", &last);
		/* digits only, and at most 15 of them: the mock caps tokens at 2^53-1 */
		for (int d = 0; last && d < 15 && last < exp[s].body.p + exp[s].body.len &&
		     *last >= '0' && *last <= '9'; d++, last++)
			exp[s].tokens = exp[s].tokens * 10 + (unsigned long long)(*last - '0');
		/* the gateway asked for usage on the client's behalf and takes the event out */
		if (s == SHAPE_ESCAPE || s == SHAPE_CHUNKED) {
			strip_usage_event(&exp[s].body);
			exp[s].events = count_sub(&exp[s].body, "data: ", NULL);
		}
		if (shape_responses(s))
			expected_ids(&exp[s]);
		run_free(&r);
	}
}

/* ---- accounting ------------------------------------------------------------------- */

struct acct {
	long long received, written, dropped, timed_out;
};

/* The counters summed over every node (one agent: its own row), so that received =
 * written + dropped holds for the store as a whole. */
static int acct_read(struct db *db, struct acct *a)
{
	struct db_stmt *st = NULL;
	int rc = -1;
	if (db_prepare(db, "SELECT sum(received), sum(written), sum(dropped), sum(timed_out)"
		       " FROM accounting", &st) < 0 || db_step(st) != DB_ROW)
		goto out;
	a->received = db_col_int(st, 0);
	a->written = db_col_int(st, 1);
	a->dropped = db_col_int(st, 2);
	a->timed_out = db_col_int(st, 3);
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, "%s: accounting: %s\n", prog, db_errmsg(db));
	db_finalize(st);
	return rc;
}

/* One node's counters (its accounting row). */
struct node_acct {
	char node[64];
	struct acct a;
};

/* Every node's counters, by name; at most ST_NODES_MAX of them. */
static int acct_nodes(struct db *db, struct node_acct *out, int *n)
{
	struct db_stmt *st = NULL;
	enum db_status ds = DB_ERROR;
	int rc;
	*n = 0;
	if (db_prepare(db, "SELECT node, received, written, dropped, timed_out FROM accounting"
		       " ORDER BY node", &st) < 0)
		goto out;
	while (*n < ST_NODES_MAX && (ds = db_step(st)) == DB_ROW) {
		struct node_acct *x = &out[(*n)++];
		snprintf(x->node, sizeof x->node, "%s", db_col_text(st, 0));
		x->a = (struct acct){ db_col_int(st, 1), db_col_int(st, 2), db_col_int(st, 3),
				      db_col_int(st, 4) };
	}
out:
	rc = ds == DB_ROW || ds == DB_DONE ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "%s: accounting: %s\n", prog, db_errmsg(db));
	db_finalize(st);
	return rc;
}

/* What node x wrote since before (no row before: all of it). */
static long long acct_node_written(const struct node_acct *x, const struct node_acct *before,
				   int nbefore)
{
	for (int i = 0; i < nbefore; i++)
		if (strcmp(before[i].node, x->node) == 0)
			return x->a.written - before[i].a.written;
	return x->a.written;
}

/* Ends sql with "request_id IN (?, ...)" for ids[0..k), prepares it and binds the ids from
 * parameter first on (those before it are the caller's). 0 or -1. */
static int ids_prepare(struct db *db, struct buf *sql, char *const *ids, size_t k, int first,
		       struct db_stmt **st)
{
	buf_printf(sql, "request_id IN (?");
	for (size_t i = 1; i < k; i++)
		buf_add(sql, ",?", 2);
	buf_add(sql, ")", 2);       /* with the terminating NUL */
	if (db_prepare(db, sql->p, st) < 0)
		return -1;
	for (size_t i = 0; i < k; i++)
		if (db_bind_text(*st, first + (int)i, ids[i], strlen(ids[i])) < 0)
			return -1;
	return 0;
}

/* Rows whose request_id is one of ids, and their completion tokens, counted in chunks
 * of bound parameters so that the database is only read. With billed (a model name):
 * only the rows that bill the BILLED shapes' usage, named and priced as that model. */
static int acct_rows(struct db *db, char *const *ids, size_t n, const char *billed,
		     long long *rows, long long *tokens)
{
	struct db_stmt *st = NULL;
	struct buf sql = { 0 };
	int rc = -1, p = billed != NULL;
	*rows = *tokens = 0;
	for (size_t at = 0; at < n; at += ST_SQL_CHUNK) {
		size_t k = n - at < ST_SQL_CHUNK ? n - at : ST_SQL_CHUNK;
		sql.len = 0;
		buf_printf(&sql, "SELECT count(*), sum(completion_tokens) FROM requests WHERE ");
		if (billed)
			buf_printf(&sql, "model = ? AND prompt_tokens = %d AND completion_tokens = %d"
				   " AND cost_micros IS NOT NULL AND ", ST_BILLED_PROMPT,
				   ST_BILLED_COMPLETION);
		if (ids_prepare(db, &sql, ids + at, k, 1 + p, &st) < 0 ||
		    (billed && db_bind_text(st, 1, billed, strlen(billed)) < 0))
			goto out;
		if (db_step(st) != DB_ROW)
			goto out;
		*rows += db_col_int(st, 0);
		*tokens += db_col_int(st, 1);
		db_finalize(st);
		st = NULL;
	}
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, "%s: requests: %s\n", prog, db_errmsg(db));
	db_finalize(st);
	free(sql.p);
	return rc;
}

/* Rows that forged records made: none, ever. */
static int acct_forged(struct db *db, long long *n)
{
	int64_t v;
	int rc = db_query_int(db, "SELECT count(*) FROM requests WHERE request_id LIKE"
			      " 'forged-%'", &v);
	*n = rc == 0 ? v : -1;
	return rc;
}

/* request_tags against the rows (schema 22's triggers): *want the tags the rows carry
 * (commas + 1 of each tagged row), *valid the request_tags rows naming a row with that
 * started_at and that whole tag among its tags, *stored all of them. Equal, they are the
 * rows' tags one for one (the primary key holds no row twice). */
static int acct_request_tags(struct db *db, long long *want, long long *valid,
			     long long *stored)
{
	int64_t w = -1, v = -1, n = -1;
	int rc = db_query_int(db, "SELECT coalesce(sum(length(tags) -"
			      " length(replace(tags, ',', '')) + 1), 0) FROM requests"
			      " WHERE tags IS NOT NULL", &w) |
		 db_query_int(db, "SELECT count(*) FROM request_tags g JOIN requests r ON"
			      " r.id = g.id AND r.started_at = g.started_at WHERE"
			      " replace(',' || r.tags || ',', ',' || g.tag || ',', '') <>"
			      " ',' || r.tags || ','", &v) |
		 db_query_int(db, "SELECT count(*) FROM request_tags", &n);
	*want = w;
	*valid = v;
	*stored = n;
	return rc ? -1 : 0;
}

/* The rows' sums, named as the daily rollups' columns: a few of the columns the writer
 * sums, enough to tell a row counted twice, missed or put in another group; and the
 * condition that a rollup's row d equals the group g. */
#define ST_SUMS \
	" count(*) AS requests," \
	" sum(CASE WHEN outcome <> 'complete' THEN 1 ELSE 0 END) AS errors," \
	" sum(CASE WHEN stream = 1 THEN 1 ELSE 0 END) AS streams," \
	" sum(coalesce(prompt_tokens, 0)) AS prompt_tokens," \
	" sum(coalesce(completion_tokens, 0)) AS completion_tokens," \
	" sum(coalesce(cost_micros, 0)) AS cost_micros," \
	" sum(coalesce(duration_ms, 0)) AS duration_ms_sum"
#define ST_SUMS_EQUAL \
	" AND d.requests = g.requests AND d.errors = g.errors" \
	" AND d.streams = g.streams AND d.prompt_tokens = g.prompt_tokens" \
	" AND d.completion_tokens = g.completion_tokens AND d.cost_micros = g.cost_micros" \
	" AND d.duration_ms_sum = g.duration_ms_sum"
#define ST_DAY "started_at / 86400000 * 86400"

/* What the end user or the tags check found: of the rows of the level's successes, those
 * whose end user (tags) is what their request sent; and, over the whole store, the rows'
 * groups per key, day and end user (tag), the rollup's rows, and those of them equal to
 * a group. */
struct sent_check {
	long long rows, as_sent;
	long long groups, stored, equal;
};

struct sent {
	const char *id;
	int eu, tg;
};

static int sent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sent *)a)->id, ((const struct sent *)b)->id);
}

/* Whether got (NULL: none) is what variant x sent. */
static bool eu_as_sent(const struct sent *x, const char *got)
{
	char want[ST_END_USER_LEN + 1];

	if (eu_kind(x->eu) == EU_NONE)
		return !got;
	eu_id((x->eu - 1) / 2, want);
	return got && strcmp(got, want) == 0;
}

static bool tg_as_sent(const struct sent *x, const char *got)
{
	return x->tg == 0 ? !got : got && strcmp(got, tag_sets[x->tg - 1].canon) == 0;
}

/* The rows of the level's successes against what their requests sent: the end users if
 * o names some, the tags if o sends some (a store older than either has no column). */
static int acct_sent(struct db *db, const struct opts *o, const struct run *r,
		     struct sent_check *eu, struct sent_check *tg)
{
	struct sent *sent = xrealloc(NULL, r->nids * sizeof *sent);
	struct db_stmt *st = NULL;
	struct buf sql = { 0 };
	enum db_status ds = DB_DONE;
	int rc = -1;

	for (size_t i = 0; i < r->nids; i++)
		sent[i] = (struct sent){ r->ids[i], r->eus[i], r->tgs[i] };
	qsort(sent, r->nids, sizeof *sent, sent_cmp);
	for (size_t at = 0; at < r->nids; at += ST_SQL_CHUNK) {
		size_t k = r->nids - at < ST_SQL_CHUNK ? r->nids - at : ST_SQL_CHUNK;
		sql.len = 0;
		buf_printf(&sql, "SELECT request_id, %s, %s FROM requests WHERE ",
			   o->end_users ? "end_user" : "NULL", o->tag_sets ? "tags" : "NULL");
		if (ids_prepare(db, &sql, r->ids + at, k, 1, &st) < 0)
			goto out;
		while ((ds = db_step(st)) == DB_ROW) {
			struct sent key = { db_col_text(st, 0), 0, 0 }, *x;
			if (!key.id || !(x = bsearch(&key, sent, r->nids, sizeof *sent, sent_cmp)))
				continue;
			eu->rows++;
			tg->rows++;
			eu->as_sent += eu_as_sent(x, db_col_text(st, 1));
			tg->as_sent += tg_as_sent(x, db_col_text(st, 2));
		}
		if (ds != DB_DONE)
			goto out;
		db_finalize(st);
		st = NULL;
	}
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, "%s: end users and tags: %s\n", prog, db_errmsg(db));
	db_finalize(st);
	free(sql.p);
	free(sent);
	return rc;
}

/* The rows' groups (groups: a query naming the columns of on and the sums) against the
 * rollup table's rows over the whole store (on: a group's row d of it), into c. */
static int acct_daily(struct db *db, const char *groups, const char *table, const char *on,
		      struct sent_check *c)
{
	struct buf sql[3] = { { 0 } };
	int64_t v[3];
	int rc = 0;

	buf_add(&sql[0], "SELECT count(*) FROM (", 22);
	buf_add(&sql[0], groups, strlen(groups));
	buf_add(&sql[0], ") g", 4);
	buf_printf(&sql[1], "SELECT count(*) FROM %s", table);
	buf_add(&sql[1], "", 1);
	buf_add(&sql[2], sql[0].p, sql[0].len - 1);
	buf_printf(&sql[2], " JOIN %s d ON %s", table, on);
	buf_add(&sql[2], ST_SUMS_EQUAL, sizeof ST_SUMS_EQUAL);
	for (int i = 0; i < 3 && rc == 0; i++)
		rc = db_query_int(db, sql[i].p, &v[i]);
	for (int i = 0; i < 3; i++)
		free(sql[i].p);
	if (rc < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, table, db_errmsg(db));
		return -1;
	}
	c->groups = v[0];
	c->stored = v[1];
	c->equal = v[2];
	return 0;
}

/* Every row as sent, and the rollup equal to the rows' groups. */
static bool sent_check_ok(const struct sent_check *c)
{
	return c->as_sent == c->rows && c->equal == c->groups && c->stored == c->groups;
}

#define ST_EU_GROUPS \
	"SELECT key_id, " ST_DAY " AS day, end_user," ST_SUMS \
	" FROM requests WHERE key_id > 0 AND end_user IS NOT NULL GROUP BY 1, 2, 3"

/* The rows' groups per tag, key (per_key) and day, of each tag the sets hold (a row in
 * the group of each tag it carries), as a query into sql. */
static void tg_groups(struct buf *sql, bool per_key)
{
	struct { const char *p; size_t n; } tags[ST_TAG_SETS * 8];   /* 8 a set at most */
	size_t ntags = 0;

	buf_printf(sql, "SELECT s.tag, %s" ST_DAY " AS day,", per_key ? "key_id, " : "");
	buf_add(sql, ST_SUMS, strlen(ST_SUMS));
	buf_printf(sql, " FROM requests JOIN (");
	for (int i = 0; i < ST_TAG_SETS; i++) {
		for (const char *p = tag_sets[i].canon; *p; ) {
			size_t n = strcspn(p, ","), j;
			for (j = 0; j < ntags && !(tags[j].n == n && !memcmp(tags[j].p, p, n)); j++)
				;
			if (j == ntags) {
				buf_printf(sql, "%sSELECT '%.*s' AS tag", ntags ? " UNION ALL " : "",
					   (int)n, p);
				tags[ntags].p = p;
				tags[ntags++].n = n;
			}
			p += n + (p[n] == ',');
		}
	}
	/* a row carries tag t if replacing ",t," in its tags between commas changes them */
	buf_printf(sql, ") s ON replace(',' || tags || ',', ',' || s.tag || ',', '')"
		   " <> ',' || tags || ',' WHERE key_id > 0 AND tags IS NOT NULL GROUP BY %s",
		   per_key ? "1, 2, 3" : "1, 2");
	buf_add(sql, "", 1);
}

static bool acct_same(const struct acct *a, const struct acct *b)
{
	return a->received == b->received && a->written == b->written &&
	       a->dropped == b->dropped && a->timed_out == b->timed_out;
}

/* Waits until the agent has nothing in flight (received == written + dropped) and
 * either every id has its row or the counters stayed put for half a second; gives up
 * after ST_SETTLE_S. */
static int acct_wait(struct db *db, const struct run *r, struct acct *after, long long *rows,
		     long long *tokens)
{
	double end = now_s() + ST_SETTLE_S;
	struct acct prev = { -1, -1, -1, -1 };
	int stable = 0;
	*rows = 0;
	for (;;) {
		if (acct_read(db, after) < 0)
			return -1;
		bool settled = after->received == after->written + after->dropped;
		stable = settled && acct_same(after, &prev) ? stable + 1 : 0;
		prev = *after;
		if (settled) {
			if (acct_rows(db, r->ids, r->nids, NULL, rows, tokens) < 0)
				return -1;
			if ((unsigned long long)*rows == r->ok || stable >= 5)
				return 0;
		}
		if (now_s() > end)
			return 0;
		struct timespec ts = { 0, 100 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* ---- report ----------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void dvec_sort(struct dvec *d)
{
	if (d->n)
		qsort(d->v, d->n, sizeof *d->v, cmp_double);
}

/* Nearest rank on the sorted samples, in milliseconds. */
static double pct_ms(const struct dvec *d, double p)
{
	if (d->n == 0)
		return 0;
	size_t rank = (size_t)(p / 100.0 * (double)d->n + 0.999999999);
	if (rank < 1)
		rank = 1;
	if (rank > d->n)
		rank = d->n;
	return d->v[rank - 1] * 1000.0;
}

struct level_report {
	int conns;
	const struct run *r;
	bool acct_done, exact, balanced;
	long long rows, tokens, forged_rows;
	long long billed;               /* BILLED shapes' rows that bill their usage exactly */
	struct acct delta, after;
	/* each node's counters after the level, what it wrote during it, and whether
	 * received = written + dropped holds for every node */
	struct node_acct nodes[ST_NODES_MAX];
	long long node_written[ST_NODES_MAX];
	int nnodes;
	bool nodes_balanced;
	bool eu_done, eu_ok;            /* the end user check ran, and found all as sent */
	struct sent_check eu;
	bool tg_done, tg_ok;            /* the same of the tags check */
	struct sent_check tg;
	struct sent_check tt;           /* tag_total_daily: its groups only */
	long long rt_want, rt_valid, rt_stored;   /* request_tags: acct_request_tags */
};

static unsigned long long errors_total(const struct run *r)
{
	unsigned long long n = 0;
	for (int e = 0; e < ERR_N; e++)
		n += r->errors[e];
	return n;
}

/* The JSON of an end user or tags check, added to parent as name. */
static cJSON *report_check_json(cJSON *parent, const char *name, bool ok,
				const struct sent_check *c)
{
	cJSON *e = cJSON_AddObjectToObject(parent, name);
	cJSON_AddBoolToObject(e, "exact", ok);
	cJSON_AddNumberToObject(e, "rows", (double)c->rows);
	cJSON_AddNumberToObject(e, "as_sent", (double)c->as_sent);
	cJSON_AddNumberToObject(e, "daily_groups", (double)c->groups);
	cJSON_AddNumberToObject(e, "daily_rows", (double)c->stored);
	cJSON_AddNumberToObject(e, "daily_equal", (double)c->equal);
	return e;
}

static void report_json(const struct level_report *L)
{
	const struct run *r = L->r;
	double el = r->t1 - r->t0 > 0 ? r->t1 - r->t0 : 1e-9;
	cJSON *o = cJSON_CreateObject(), *lat = cJSON_CreateObject(), *fb = cJSON_CreateObject();
	cJSON *errs = cJSON_CreateObject(), *st = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "connections", L->conns);
	cJSON_AddNumberToObject(o, "requests", (double)(r->ok + r->refused + errors_total(r)));
	cJSON_AddNumberToObject(o, "ok", (double)r->ok);
	cJSON_AddNumberToObject(o, "ok_streams", (double)r->ok_streams);
	cJSON_AddNumberToObject(o, "refused", (double)r->refused);
	cJSON *by_url = cJSON_AddArrayToObject(o, "ok_by_url");
	for (int t = 0; t < r->ntgts; t++)
		cJSON_AddItemToArray(by_url, cJSON_CreateNumber((double)r->ok_tgt[t]));
	cJSON_AddNumberToObject(o, "elapsed_s", el);
	cJSON_AddNumberToObject(o, "requests_per_s", (double)r->ok / el);
	cJSON_AddNumberToObject(o, "events", (double)r->events);
	cJSON_AddNumberToObject(o, "events_per_s", (double)r->events / el);
	cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
	cJSON_AddNumberToObject(o, "bytes_per_s", (double)r->bytes / el);
	cJSON_AddNumberToObject(o, "output_tokens", (double)r->tokens);
	cJSON_AddNumberToObject(o, "output_tokens_per_s", (double)r->tokens / el);
	cJSON_AddStringToObject(o, "output_tokens_source", "usage");
	cJSON_AddItemToObject(o, "latency_ms", lat);
	cJSON_AddNumberToObject(lat, "p50", pct_ms(&r->lat, 50));
	cJSON_AddNumberToObject(lat, "p95", pct_ms(&r->lat, 95));
	cJSON_AddNumberToObject(lat, "p99", pct_ms(&r->lat, 99));
	cJSON_AddNumberToObject(lat, "max", pct_ms(&r->lat, 100));
	cJSON_AddItemToObject(o, "first_byte_ms", fb);
	cJSON_AddNumberToObject(fb, "p95", pct_ms(&r->fb, 95));
	cJSON_AddItemToObject(o, "errors", errs);
	cJSON_AddNumberToObject(errs, "total", (double)errors_total(r));
	for (int e = 0; e < ERR_N; e++)
		cJSON_AddNumberToObject(errs, err_names[e], (double)r->errors[e]);
	cJSON_AddItemToObject(errs, "by_status", st);
	for (int s = 0; s < ST_STATUS_MAX; s++) {
		char k[8];
		snprintf(k, sizeof k, "%d", s);
		if (r->status[s])
			cJSON_AddNumberToObject(st, k, (double)r->status[s]);
	}
	if (L->acct_done) {
		cJSON *a = cJSON_CreateObject();
		cJSON_AddItemToObject(o, "accounting", a);
		cJSON_AddBoolToObject(a, "exact", L->exact);
		cJSON_AddNumberToObject(a, "rows", (double)L->rows);
		cJSON_AddNumberToObject(a, "expected", (double)r->ok);
		cJSON_AddNumberToObject(a, "completion_tokens", (double)L->tokens);
		cJSON_AddNumberToObject(a, "completion_tokens_expected", (double)r->tokens);
		cJSON_AddNumberToObject(a, "forged_records", (double)r->forged);
		cJSON_AddNumberToObject(a, "forged_rows", (double)L->forged_rows);
		cJSON_AddNumberToObject(a, "billed_rows", (double)L->billed);
		cJSON_AddNumberToObject(a, "billed_expected", (double)r->nbids);
		cJSON_AddNumberToObject(a, "missing_request_id", (double)r->no_id);
		cJSON_AddNumberToObject(a, "dropped", (double)L->delta.dropped);
		cJSON_AddNumberToObject(a, "timed_out", (double)L->delta.timed_out);
		cJSON_AddBoolToObject(a, "balanced", L->balanced);
		cJSON_AddNumberToObject(a, "received", (double)L->after.received);
		cJSON_AddNumberToObject(a, "written", (double)L->after.written);
		cJSON_AddNumberToObject(a, "dropped_total", (double)L->after.dropped);
		cJSON_AddBoolToObject(a, "nodes_balanced", L->nodes_balanced);
		if (L->eu_done) {
			cJSON *e = report_check_json(a, "end_users", L->eu_ok, &L->eu);
			for (int k = 0; k < 3; k++)
				cJSON_AddNumberToObject(e, eu_kind_names[k], (double)r->eu_sent[k]);
		}
		if (L->tg_done) {
			cJSON *e = report_check_json(a, "tags", L->tg_ok, &L->tg);
			cJSON *sets = cJSON_AddArrayToObject(e, "sets");
			cJSON_AddNumberToObject(e, "none", (double)r->tg_sent[0]);
			cJSON_AddNumberToObject(e, "total_groups", (double)L->tt.groups);
			cJSON_AddNumberToObject(e, "total_rows", (double)L->tt.stored);
			cJSON_AddNumberToObject(e, "total_equal", (double)L->tt.equal);
			cJSON_AddNumberToObject(e, "request_tags_want", (double)L->rt_want);
			cJSON_AddNumberToObject(e, "request_tags_valid", (double)L->rt_valid);
			cJSON_AddNumberToObject(e, "request_tags_rows", (double)L->rt_stored);
			for (int k = 1; k <= ST_TAG_SETS; k++)
				cJSON_AddItemToArray(sets, cJSON_CreateNumber((double)r->tg_sent[k]));
		}
		cJSON *nodes = cJSON_AddArrayToObject(a, "nodes");
		for (int i = 0; i < L->nnodes; i++) {
			const struct node_acct *x = &L->nodes[i];
			cJSON *n = cJSON_CreateObject();
			cJSON_AddItemToArray(nodes, n);
			cJSON_AddStringToObject(n, "node", x->node);
			cJSON_AddNumberToObject(n, "received", (double)x->a.received);
			cJSON_AddNumberToObject(n, "written", (double)x->a.written);
			cJSON_AddNumberToObject(n, "dropped", (double)x->a.dropped);
			cJSON_AddNumberToObject(n, "written_level", (double)L->node_written[i]);
		}
	}
	char *txt = cJSON_PrintUnformatted(o);
	if (!txt)
		abort();
	puts(txt);
	fflush(stdout);
	free(txt);
	cJSON_Delete(o);
}

static void report_human(const struct level_report *L, bool first)
{
	const struct run *r = L->r;
	double el = r->t1 - r->t0 > 0 ? r->t1 - r->t0 : 1e-9;
	if (first)
		printf("%5s %8s %8s %6s %9s %10s %8s %9s %8s %8s %8s %8s %8s\n", "conns", "ok",
		       "streams", "errors", "req/s", "events/s", "MB/s", "tok/s", "p50 ms",
		       "p95 ms", "p99 ms", "max ms", "fb95 ms");
	printf("%5d %8llu %8llu %6llu %9.1f %10.1f %8.2f %9.1f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
	       L->conns, r->ok, r->ok_streams, errors_total(r), (double)r->ok / el,
	       (double)r->events / el, (double)r->bytes / el / 1e6, (double)r->tokens / el,
	       pct_ms(&r->lat, 50), pct_ms(&r->lat, 95), pct_ms(&r->lat, 99),
	       pct_ms(&r->lat, 100), pct_ms(&r->fb, 95));
	if (errors_total(r)) {
		printf("      errors:");
		for (int e = 0; e < ERR_N; e++)
			if (r->errors[e] && e != ERR_STATUS)
				printf(" %s=%llu", err_names[e], r->errors[e]);
		for (int s = 0; s < ST_STATUS_MAX; s++)
			if (r->status[s])
				printf(" status_%d=%llu", s, r->status[s]);
		printf("\n");
	}
	if (L->acct_done)
		printf("      accounting %s%lld/%llu%s, completion tokens %lld/%llu (dropped +%lld,"
		       " timed_out +%lld)\n", L->exact ? "" : "SHORT ", L->rows, r->ok,
		       L->exact ? " exact" : "", L->tokens, r->tokens, L->delta.dropped,
		       L->delta.timed_out);
	if (L->eu_done)
		printf("      end users %lld/%lld as sent (header %llu, body %llu, none %llu),"
		       " end_user_daily %lld/%lld groups of the rows' sums (%lld stored)%s\n",
		       L->eu.as_sent, L->eu.rows, r->eu_sent[EU_HEADER], r->eu_sent[EU_BODY],
		       r->eu_sent[EU_NONE], L->eu.equal, L->eu.groups, L->eu.stored,
		       L->eu_ok ? "" : " WRONG");
	if (L->tg_done) {
		printf("      tags %lld/%lld as sent (sets", L->tg.as_sent, L->tg.rows);
		for (int k = 1; k <= ST_TAG_SETS; k++)
			printf("%c%llu", k == 1 ? ' ' : '/', r->tg_sent[k]);
		printf(", none %llu), tag_daily %lld/%lld groups of the rows' sums (%lld stored),"
		       " tag_total_daily %lld/%lld (%lld stored), request_tags %lld/%lld of the"
		       " rows' tags (%lld stored)%s\n", r->tg_sent[0], L->tg.equal,
		       L->tg.groups, L->tg.stored, L->tt.equal, L->tt.groups, L->tt.stored,
		       L->rt_valid, L->rt_want, L->rt_stored, L->tg_ok ? "" : " WRONG");
	}
	for (int i = 0; L->acct_done && L->nnodes > 1 && i < L->nnodes; i++) {
		const struct node_acct *x = &L->nodes[i];
		printf("      node %s: wrote %lld; received %lld = written %lld + dropped %lld%s\n",
		       x->node, L->node_written[i], x->a.received, x->a.written, x->a.dropped,
		       x->a.received == x->a.written + x->a.dropped ? "" : " UNBALANCED");
	}
	if (r->refused)
		printf("      refused (status %d): %llu\n", r->refused_status, r->refused);
	if (L->acct_done && r->forged)
		printf("      forged records %llu, rows they made %lld\n", r->forged, L->forged_rows);
	if (L->acct_done && r->nbids)
		printf("      hostile rows billing the upstream's usage %lld/%zu%s\n", L->billed,
		       r->nbids, (size_t)L->billed == r->nbids ? "" : " WRONG");
	if (L->acct_done && L->delta.dropped)
		printf("      received %lld = written %lld + dropped %lld: %s\n", L->after.received,
		       L->after.written, L->after.dropped, L->balanced ? "balanced" : "UNBALANCED");
	fflush(stdout);
}

/* ---- command line ----------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s --url http://HOST:PORT --expect-url http://MOCKHOST:PORT\n"
		"       (--requests N | --duration S) [options]\n"
		"  --url URL             gateway; requests go to " ST_PATH " (some hostile ones\n"
		"                        to " ST_RESPONSES "); repeatable (8):\n"
		"                        the clients of a level are spread evenly over them\n"
		"  --expect-url URL      mock upstream, asked once per level and shape for the\n"
		"                        expected body (Bearer $TALLY_MOCK_CREDENTIAL if set)\n"
		"  --key KEY             sent to the gateway as Authorization: Bearer KEY\n"
		"  --keys K1,K2,...      one key per --url, in order: the clients of each --url\n"
		"                        send its own (a team's keys, one per node)\n"
		"  --levels 1,8,32       concurrency levels, run one after another (default 1)\n"
		"  --requests N          requests per level\n"
		"  --duration S          seconds per level (requests in flight then finish)\n"
		"  --stream-pct P        0-100: share of SSE streams, spread evenly by index\n"
		"  --hostile-pct P       0-100: share of requests that try to get around the meter\n"
		"                        (streams with include_usage false, chunked bodies,\n"
		"                        upstream errors on amended streams, /v1/responses echoing\n"
		"                        a forged usage, another model's name or padding around\n"
		"                        the usage, an unpriced usage class), in turn; with --db\n"
		"                        the last four's rows must bill %d + %d tokens, priced,\n"
		"                        as --model\n"
		"  --forge HOST:PORT     send the agent's records port (UDP) a forged zero-usage\n"
		"                        record for every response's id; with --db, a level\n"
		"                        passes only if no forged record made or changed a row\n"
		"  --frames N            x-mock-frames (default: not sent)\n"
		"  --frame-delay-ms MS   x-mock-frame-delay-ms (default: not sent)\n"
		"  --body-bytes N        x-mock-body-bytes on unary requests (default: not sent)\n"
		"  --max-tokens N        max_tokens in the body (default 100)\n"
		"  --model NAME          model in the body (default mock-gpt)\n"
		"  --keepalive 0|1       reuse connections (default 1)\n"
		"  --timeout S           per request, connect included (default 30)\n"
		"  --connect-timeout S   (default 5)\n"
		"  --db STORE            check one accounting row per successful request in the\n"
		"                        agent's store (a SQLite path or a postgresql:// URL)\n"
		"  --json                one JSON object per level on stdout\n"
		"  --header 'Name: value'  extra header on every request to --url (repeatable, 8)\n"
		"  --allow-drops         deliberate overload: with --db, a level passes when every\n"
		"                        successful request has its row or was counted dropped,\n"
		"                        and received = written + dropped\n"
		"  --refused-status CODE a response with this status (e.g. 429) counts as refused,\n"
		"                        not as an error\n"
		"  --refused-pause-ms MS a refused client waits this long before its next request\n"
		"  --end-users N         0-%d: of three requests one names no end user, one names\n"
		"                        one of N by the X-Tally-User header, one in the body\n"
		"                        (chat: user; Responses: safety_identifier); with --db\n"
		"                        each row must have its request's end user and\n"
		"                        end_user_daily the rows' sums (default %d; 0: none, and\n"
		"                        no end user check)\n"
		"  --tag-sets N          0-%d: of N + 1 requests one sends no X-Tally-Tags, the\n"
		"                        others one of N sets of 1 to 3 tags each; with --db each\n"
		"                        row must have its request's tags (canonical text) and\n"
		"                        tag_daily and tag_total_daily the rows' sums per tag (the\n"
		"                        keys must fix no tags; default %d; 0: none, and no tags\n"
		"                        check)\n"
		"Exit status: 0 all good, 1 errors or accounting SHORT, 2 usage or setup failure.\n",
		prog, ST_BILLED_PROMPT, ST_BILLED_COMPLETION, ST_END_USERS_MAX, ST_END_USERS,
		ST_TAG_SETS, ST_TAG_SETS);
}

static long parse_long(const char *s, const char *name, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		die("--%s: want an integer in %ld..%ld, got '%s'", name, min, max, s);
	return v;
}

static double parse_secs(const char *s, const char *name)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 86400)
		die("--%s: want seconds in (0, 86400], got '%s'", name, s);
	return v;
}

static void parse_levels(struct opts *o, const char *s)
{
	char tmp[512];
	if (strlen(s) >= sizeof tmp)
		die("--levels: too long");
	strcpy(tmp, s);
	o->nlevels = 0;
	for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (o->nlevels == ST_LEVELS_MAX)
			die("--levels: at most %d", ST_LEVELS_MAX);
		o->levels[o->nlevels++] = (int)parse_long(t, "levels", 1, 100000);
	}
	if (o->nlevels == 0)
		die("--levels: empty");
}

/* --keys K1,K2,...: one key per --url, in the same order. */
static void parse_keys(struct opts *o, const char *s)
{
	if (strlen(s) >= sizeof o->keybuf)
		die("--keys: too long");
	strcpy(o->keybuf, s);
	o->nkeys = 0;
	for (char *save = NULL, *t = strtok_r(o->keybuf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (o->nkeys == ST_TARGETS_MAX)
			die("--keys: at most %d", ST_TARGETS_MAX);
		o->keys[o->nkeys++] = t;
	}
}

static void parse_opts(struct opts *o, int argc, char **argv)
{
	enum { O_URL = 256, O_EXPECT, O_KEY, O_LEVELS, O_REQUESTS, O_DURATION, O_PCT, O_FRAMES,
	       O_DELAY, O_BODY, O_MAXTOK, O_MODEL, O_KA, O_TIMEOUT, O_CTIMEOUT, O_DB, O_JSON,
	       O_HEADER, O_DROPS, O_HOSTILE, O_FORGE, O_REFUSED, O_PAUSE, O_KEYS, O_END_USERS,
	       O_TAG_SETS, O_HELP };
	static const struct option lo[] = {
		{ "url", required_argument, NULL, O_URL },
		{ "expect-url", required_argument, NULL, O_EXPECT },
		{ "key", required_argument, NULL, O_KEY },
		{ "levels", required_argument, NULL, O_LEVELS },
		{ "requests", required_argument, NULL, O_REQUESTS },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "stream-pct", required_argument, NULL, O_PCT },
		{ "frames", required_argument, NULL, O_FRAMES },
		{ "frame-delay-ms", required_argument, NULL, O_DELAY },
		{ "body-bytes", required_argument, NULL, O_BODY },
		{ "max-tokens", required_argument, NULL, O_MAXTOK },
		{ "model", required_argument, NULL, O_MODEL },
		{ "keepalive", required_argument, NULL, O_KA },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "connect-timeout", required_argument, NULL, O_CTIMEOUT },
		{ "db", required_argument, NULL, O_DB },
		{ "json", no_argument, NULL, O_JSON },
		{ "header", required_argument, NULL, O_HEADER },
		{ "allow-drops", no_argument, NULL, O_DROPS },
		{ "hostile-pct", required_argument, NULL, O_HOSTILE },
		{ "forge", required_argument, NULL, O_FORGE },
		{ "refused-status", required_argument, NULL, O_REFUSED },
		{ "refused-pause-ms", required_argument, NULL, O_PAUSE },
		{ "keys", required_argument, NULL, O_KEYS },
		{ "end-users", required_argument, NULL, O_END_USERS },
		{ "tag-sets", required_argument, NULL, O_TAG_SETS },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct opts){ .model = "mock-gpt", .levels = { 1 }, .nlevels = 1, .timeout = 30,
			    .connect_timeout = 5, .frames = -1, .frame_delay_ms = -1,
			    .body_bytes = -1, .max_tokens = 100, .keepalive = true,
			    .end_users = ST_END_USERS, .tag_sets = ST_TAG_SETS };
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case O_URL:
			if (o->nurls == ST_TARGETS_MAX)
				die("--url: at most %d", ST_TARGETS_MAX);
			o->urls[o->nurls++] = optarg;
			break;
		case O_EXPECT: o->expect_url = optarg; break;
		case O_KEY: o->key = optarg; break;
		case O_LEVELS: parse_levels(o, optarg); break;
		case O_REQUESTS: o->requests = parse_long(optarg, "requests", 1, 1000000000); break;
		case O_DURATION: o->duration = parse_secs(optarg, "duration"); break;
		case O_PCT: o->stream_pct = parse_long(optarg, "stream-pct", 0, 100); break;
		case O_FRAMES: o->frames = parse_long(optarg, "frames", 0, 1000000); break;
		case O_DELAY: o->frame_delay_ms = parse_long(optarg, "frame-delay-ms", 0, 3600000); break;
		case O_BODY: o->body_bytes = parse_long(optarg, "body-bytes", 0, 16 << 20); break;
		case O_MAXTOK: o->max_tokens = parse_long(optarg, "max-tokens", 1, 1000000000); break;
		case O_MODEL: o->model = optarg; break;
		case O_KA: o->keepalive = parse_long(optarg, "keepalive", 0, 1); break;
		case O_TIMEOUT: o->timeout = parse_secs(optarg, "timeout"); break;
		case O_CTIMEOUT: o->connect_timeout = parse_secs(optarg, "connect-timeout"); break;
		case O_DB: o->db = optarg; break;
		case O_JSON: o->json = true; break;
		case O_HEADER:
			/* "Name: value" on one line: anything else would inject or break the request */
			if (o->nheaders == ST_HEADERS_MAX || !strchr(optarg, ':') || optarg[0] == ':' ||
			    strpbrk(optarg, "\r\n"))
				die("--header: at most %d, each \"Name: value\" on one line", ST_HEADERS_MAX);
			o->headers[o->nheaders++] = optarg;
			break;
		case O_DROPS: o->allow_drops = true; break;
		case O_HOSTILE: o->hostile_pct = parse_long(optarg, "hostile-pct", 0, 100); break;
		case O_FORGE: o->forge = optarg; break;
		case O_REFUSED: o->refused_status = (int)parse_long(optarg, "refused-status", 100, 999); break;
		case O_PAUSE: o->refused_pause_ms = parse_long(optarg, "refused-pause-ms", 0, 3600000); break;
		case O_KEYS: parse_keys(o, optarg); break;
		case O_END_USERS:
			o->end_users = parse_long(optarg, "end-users", 0, ST_END_USERS_MAX);
			break;
		case O_TAG_SETS: o->tag_sets = parse_long(optarg, "tag-sets", 0, ST_TAG_SETS); break;
		case O_HELP: usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc)
		die("unexpected argument '%s'", argv[optind]);
	if (!o->nurls || !o->expect_url)
		die("--url and --expect-url are required (--help)");
	if (o->nkeys && o->key)
		die("--keys or --key, not both");
	if (o->nkeys && o->nkeys != o->nurls)
		die("--keys: one key per --url (%d), not %d", o->nurls, o->nkeys);
	if ((o->requests > 0) == (o->duration > 0))
		die("exactly one of --requests and --duration is required");
	/* the model goes into JSON unescaped */
	if (strpbrk(o->model, "\"\\") || strlen(o->model) > 200)
		die("--model: no quotes or backslashes, at most 200 bytes");
}

int main(int argc, char **argv)
{
	struct opts o;
	struct target gw[ST_TARGETS_MAX] = { 0 }, mock = { 0 };
	struct expected exp[SHAPE_N] = { 0 };
	struct db *db = NULL;
	char dberr[512];
	bool failed = false;
	parse_opts(&o, argc, argv);
	/* one descriptor per connection: large levels need more than the usual 1024
	 * (best effort: without it they get connect errors, which are reported) */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int t = 0; t < o.nurls; t++)
		build_target(&gw[t], &o, o.urls[t], o.nkeys ? o.keys[t] : o.key, 1);
	build_target(&mock, &o, o.expect_url, getenv("TALLY_MOCK_CREDENTIAL"), 0);
	if (o.db) {
		if (db_open(o.db, DB_READONLY, &db, dberr, sizeof dberr) < 0)
			die("%s", dberr);
	}
	int forge_fd = -1;
	struct sockaddr_storage forge_addr;
	socklen_t forge_addrlen = 0;
	if (o.forge) {
		struct target ft;
		char url[320], hp[300];
		snprintf(url, sizeof url, "http://%s", o.forge);
		parse_url(url, &ft, hp, sizeof hp);
		forge_addr = ft.addr;
		forge_addrlen = ft.addrlen;
		if ((forge_fd = socket(ft.addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
			die("--forge: %s", strerror(errno));
	}
	struct ev_loop *loop = EV_DEFAULT;
	for (int i = 0; i < o.nlevels; i++) {
		struct acct before = { 0 }, after = { 0 };
		struct run r;
		struct level_report L = { .conns = o.levels[i], .r = &r };
		struct node_acct nodes_before[ST_NODES_MAX];
		int nbefore = 0;
		fetch_expected(loop, &o, &mock, exp);
		if (db && (acct_read(db, &before) < 0 || acct_nodes(db, nodes_before, &nbefore) < 0))
			die("%s: cannot read the accounting table", o.db);
		run_init(&r, loop, &o, gw, o.nurls);
		r.exp = exp;
		r.forge_fd = forge_fd;
		r.forge_addr = forge_addr;
		r.forge_addrlen = forge_addrlen;
		run_exec(&r, o.levels[i], o.duration);
		dvec_sort(&r.lat);
		dvec_sort(&r.fb);
		if (db) {
			long long billed_tokens;
			if (acct_wait(db, &r, &after, &L.rows, &L.tokens) < 0 ||
			    acct_rows(db, r.bids, r.nbids, o.model, &L.billed, &billed_tokens) < 0 ||
			    acct_forged(db, &L.forged_rows) < 0 ||
			    acct_nodes(db, L.nodes, &L.nnodes) < 0)
				die("%s: cannot read accounting rows", o.db);
			if ((o.end_users || o.tag_sets) && acct_sent(db, &o, &r, &L.eu, &L.tg) < 0)
				die("%s: cannot read the end users' and tags' rows", o.db);
			if (o.end_users && acct_daily(db, ST_EU_GROUPS, "end_user_daily",
						      "d.key_id = g.key_id AND d.day = g.day"
						      " AND d.end_user = g.end_user", &L.eu) < 0)
				die("%s: cannot read end_user_daily", o.db);
			for (int k = 0; o.tag_sets && k < 2; k++) {
				struct buf sql = { 0 };
				tg_groups(&sql, k == 0);
				if (acct_daily(db, sql.p, k == 0 ? "tag_daily" : "tag_total_daily",
					       k == 0 ? "d.key_id = g.key_id AND d.day = g.day AND d.tag = g.tag"
						      : "d.day = g.day AND d.tag = g.tag",
					       k == 0 ? &L.tg : &L.tt) < 0)
					die("%s: cannot read the tags' rollups", o.db);
				free(sql.p);
			}
			if (o.tag_sets && acct_request_tags(db, &L.rt_want, &L.rt_valid,
							    &L.rt_stored) < 0)
				die("%s: cannot read request_tags", o.db);
			L.acct_done = true;
			L.eu_done = o.end_users > 0;
			L.eu_ok = !L.eu_done || sent_check_ok(&L.eu);
			L.tg_done = o.tag_sets > 0;
			L.tg_ok = !L.tg_done || (sent_check_ok(&L.tg) && L.tt.equal == L.tt.groups &&
						 L.tt.stored == L.tt.groups &&
						 L.rt_valid == L.rt_want && L.rt_stored == L.rt_want);
			L.nodes_balanced = true;
			for (int k = 0; k < L.nnodes; k++) {
				const struct acct *a = &L.nodes[k].a;
				L.node_written[k] = acct_node_written(&L.nodes[k], nodes_before, nbefore);
				L.nodes_balanced &= a->received == a->written + a->dropped;
			}
			L.delta.dropped = after.dropped - before.dropped;
			L.delta.timed_out = after.timed_out - before.timed_out;
			/* every success has its row, with the usage the upstream reported (the
			 * BILLED shapes' counts, model and price too) and the end user and tags its
			 * request sent, no forged record made one, and every node's counters
			 * balance without drops */
			L.exact = (unsigned long long)L.rows == r.ok && r.no_id == 0 && L.eu_ok &&
			          L.tg_ok &&
			          (unsigned long long)L.tokens == r.tokens && L.forged_rows == 0 &&
			          (size_t)L.billed == r.nbids &&
			          L.nodes_balanced && L.delta.dropped == 0;
			L.after = after;
			/* Under overload a successful response may have lost its row, but only
			 * as a counted drop. */
			L.balanced = after.received == after.written + after.dropped && L.eu_ok &&
			             L.tg_ok &&
			             (unsigned long long)(L.rows + L.delta.dropped) >= r.ok &&
			             r.no_id == 0;
		}
		if (o.json)
			report_json(&L);
		else
			report_human(&L, i == 0);
		failed |= errors_total(&r) > 0 ||
		          (L.acct_done && !(o.allow_drops ? L.balanced : L.exact));
		run_free(&r);
	}
	for (int t = 0; t < o.nurls; t++)
		target_free(&gw[t]);
	target_free(&mock);
	for (int s = 0; s < SHAPE_N; s++) {
		free(exp[s].body.p);
		free(exp[s].any);
	}
	db_close(db);
	if (forge_fd >= 0)
		close(forge_fd);
	ev_loop_destroy(loop);
	return failed ? 1 : 0;
}
