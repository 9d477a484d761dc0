/* mock-upstream: a deterministic impersonation of the OpenAI and Anthropic HTTP APIs, the
 * upstream of every tally integration test and benchmark (usage: loadtest/README.md).
 * Owns the listener, the client connections, their HTTP/1.1 parsing (http-parser),
 * response rendering (cJSON), the request log behind /_mock/requests and the counters
 * behind /_mock/stats. One thread runs everything on one libev loop. Allocation failure
 * aborts: a test tool that cannot allocate has nothing better to do. */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <ev.h>
#include <http_parser.h>
#include <openssl/evp.h>

#include "hash.h"

#define MOCK_BODY_MAX   (8u << 20)      /* larger request bodies get 413 */
#define MOCK_IN_CAP     (64u << 10)     /* unparsed input held per connection */
#define MOCK_OUT_HIGH   (256u << 10)    /* stop producing while this much output waits */
#define MOCK_BUF_KEEP   (128u << 10)    /* buffers above this are freed once drained */
#define MOCK_STALL_S    30.0            /* drop a client that reads nothing for this long */
#define MOCK_LINGER_S   2.0             /* wait for the client's FIN after our own */
#define MOCK_LOG_SIZE   64
#define MOCK_TEXT_MAX   4096            /* request bodies up to this size are logged as text */
#define MOCK_BUDGET     64              /* steps per connection per callback, for fairness */
#define MOCK_NONE       UINT64_MAX      /* "not set" for x-mock-disconnect-after */
#define MOCK_CREATED    "1700000000"    /* fixed "created": responses never depend on time */
#define MOCK_TOKENS_MAX 9007199254740991ull /* 2^53-1: exact in every JSON consumer */
#define MOCK_TIER_MAX   16              /* x-mock-service-tier: [a-z_]{1,16} */

/* Every knob is a CLI option "--NAME" (the default) and a request header "x-mock-NAME"
 * (per request). The numeric ones are uint64_t so that one table describes them; the
 * service tier is the one string knob ("" when unset). */
struct mock_params {
	uint64_t status, frames, frame_delay_ms, ttfb_ms, disconnect_after, body_bytes, crlf;
	uint64_t error_form, sse_open, response_end, pretty, end_delay_ms;
	struct mock_tokens {
		uint64_t prompt, completion, cached, cache_creation, reasoning;
	} tok;
	/* The usage classes added after tok: apart, so that ids stay as they were when unset. */
	struct mock_classes {
		uint64_t cache_write, cache_1h, audio_input, audio_output, accepted, rejected;
		uint64_t web_search;
	} cls;
	char service_tier[MOCK_TIER_MAX + 1];
};

struct mock_knob {
	const char *name;
	size_t off;
	uint64_t min, max;
	const char *help;
};

#define MOCK_KNOB(name, field, min, max, help) \
	{name, offsetof(struct mock_params, field), min, max, help}
static const struct mock_knob mock_knobs[] = {
	MOCK_KNOB("status", status, 400, 599, "answer with this status and an API-shaped error body"),
	MOCK_KNOB("frames", frames, 0, 1000000, "content frames per stream, words per unary answer (10)"),
	MOCK_KNOB("frame-delay-ms", frame_delay_ms, 0, 3600000, "delay before each content frame (0)"),
	MOCK_KNOB("end-delay-ms", end_delay_ms, 0, 3600000,
	          "delay between a stream's last event and the end of its body (0)"),
	MOCK_KNOB("ttfb-ms", ttfb_ms, 0, 3600000, "delay before the response headers (0)"),
	MOCK_KNOB("disconnect-after", disconnect_after, 0, 1ull << 40,
	          "close abruptly after N content frames / N unary body bytes"),
	MOCK_KNOB("body-bytes", body_bytes, 0, 16u << 20, "pad unary completions to this body size"),
	MOCK_KNOB("crlf", crlf, 0, 1, "1: SSE lines end in CRLF (0)"),
	MOCK_KNOB("error-form", error_form, 0, 4,
	          "error body: 0 JSON, 1 JSON chunked, 2 text, 3 empty, 4 text to close (0)"),
	MOCK_KNOB("sse-open", sse_open, 0, 1, "1: a stream's last event has no blank line (0)"),
	MOCK_KNOB("response-end", response_end, 0, 2,
	          "Responses API: 0 completed, 1 incomplete (max_output_tokens), 2 failed (0)"),
	MOCK_KNOB("pretty", pretty, 0, 2,
	          "JSON layout: 0 compact, 1 spaced (\", \" and \": \"), 2 indented (0)"),
	MOCK_KNOB("prompt-tokens", tok.prompt, 0, MOCK_TOKENS_MAX, "prompt/input tokens (10)"),
	MOCK_KNOB("completion-tokens", tok.completion, 0, MOCK_TOKENS_MAX,
	          "completion/output tokens (20)"),
	MOCK_KNOB("cached-tokens", tok.cached, 0, MOCK_TOKENS_MAX,
	          "cached prompt tokens / cache_read_input_tokens (0)"),
	MOCK_KNOB("cache-creation-tokens", tok.cache_creation, 0, MOCK_TOKENS_MAX,
	          "Anthropic cache_creation_input_tokens (0)"),
	MOCK_KNOB("reasoning-tokens", tok.reasoning, 0, MOCK_TOKENS_MAX, "OpenAI reasoning tokens (0)"),
	MOCK_KNOB("cache-write-tokens", cls.cache_write, 0, MOCK_TOKENS_MAX,
	          "OpenAI cache_write_tokens, part of prompt/input (0)"),
	MOCK_KNOB("cache-1h-tokens", cls.cache_1h, 0, MOCK_TOKENS_MAX,
	          "Anthropic 1h cache writes, part of cache-creation (0)"),
	MOCK_KNOB("audio-input-tokens", cls.audio_input, 0, MOCK_TOKENS_MAX,
	          "OpenAI chat prompt audio_tokens (0)"),
	MOCK_KNOB("audio-output-tokens", cls.audio_output, 0, MOCK_TOKENS_MAX,
	          "OpenAI chat completion audio_tokens (0)"),
	MOCK_KNOB("accepted-prediction-tokens", cls.accepted, 0, MOCK_TOKENS_MAX,
	          "OpenAI chat accepted_prediction_tokens (0)"),
	MOCK_KNOB("rejected-prediction-tokens", cls.rejected, 0, MOCK_TOKENS_MAX,
	          "OpenAI chat rejected_prediction_tokens (0)"),
	MOCK_KNOB("web-search-requests", cls.web_search, 0, 1000,
	          "web searches run: Anthropic server_tool_use.web_search_requests, Responses "
	          "web_search_call items and events (0)"),
};
#define MOCK_NKNOBS (sizeof mock_knobs / sizeof mock_knobs[0])

struct mock_buf {
	char *p;
	size_t off, len, cap; /* bytes [off, len) are pending; p[len] is always NUL */
};

struct mock_hdr {
	size_t name_off, name_len, value_off, value_len; /* into mock_req.hbuf */
};

struct mock_req {
	struct mock_buf url, hbuf, body;
	struct mock_hdr *hdrs;
	size_t nhdrs, hcap;
	int in_value;   /* the last header callback was a value */
	unsigned method;
	int head, keep_alive, http10;
};

enum mock_route {
	ROUTE_NONE, ROUTE_OPENAI, ROUTE_ANTHROPIC, ROUTE_MODELS, ROUTE_LOG, ROUTE_LOG_CLEAR, ROUTE_STATS,
	ROUTE_STORED
};

/* What a request on a stored response's path asks (ROUTE_STORED). */
enum mock_stored { STORED_GET, STORED_DELETE, STORED_CANCEL, STORED_INPUT_ITEMS };

enum mock_part { PART_HEAD, PART_FRAME, PART_TAIL };

struct mock_job;

/* What differs between the two API families; the transport around it is shared. */
struct mock_api {
	const char *id_prefix;
	cJSON *(*unary)(const struct mock_job *j, const char *text);
	/* Data of event i of a stream part (malloc'd, NULL once the part is over), and its
	 * SSE event name (NULL for none); NULL for an API that never streams. */
	char *(*event)(const struct mock_job *j, enum mock_part part, unsigned i, const char **name);
	cJSON *(*error)(unsigned status, const char *msg);
};

/* The response being produced for the request that was parsed last. */
struct mock_job {
	enum mock_route route;
	const struct mock_api *api;
	struct mock_params p;
	char *model;
	cJSON *echo;    /* a Responses request's body, echoed in its answer (NULL: none) */
	int stream, include_usage, chunked;
	char id[48];
	enum mock_stored stored;   /* ROUTE_STORED: what is asked of response id */
	enum mock_part part;
	unsigned idx;   /* next event within the part */
	int due;        /* the delay before the next frame, or the end, has elapsed */
};

enum mock_phase { PHASE_IDLE, PHASE_TTFB, PHASE_STREAM };

struct mock_conn {
	int fd;
	ev_io rio, wio;
	ev_timer timer; /* ttfb, frame delay, linger */
	ev_timer stall; /* output pending without progress */
	http_parser parser;
	struct mock_buf in, out;
	struct mock_req req;
	struct mock_job job;
	enum mock_phase phase;
	unsigned abort_status;  /* set by a parser callback that rejects the request */
	int closing;            /* no more requests: FIN once the output is flushed */
	int lingering;          /* FIN sent, discarding input until the client's FIN */
	int drop;               /* x-mock-disconnect-after: close once the output is flushed */
	int dead;               /* free at the end of the current callback */
	int yield;              /* work left after the step budget: resume on EV_WRITE */
	int answering;          /* an API request read, its answer not yet complete */
	struct mock_conn *prev, *next;
};

static struct {
	struct ev_loop *loop;
	int lfd;
	ev_io lio;
	ev_timer accept_retry;
	ev_signal sigterm, sigint;
	struct mock_params defaults;
	int quiet;
	struct mock_conn *conns;
	cJSON *log[MOCK_LOG_SIZE];
	uint64_t log_seq;
	struct {
		uint64_t requests, streams, bytes_out, conns_total, conns_open, aborts, disconnects;
		uint64_t answering, answering_max;
	} stats;
} mock = {
	.lfd = -1,
	.defaults = {.frames = 10, .disconnect_after = MOCK_NONE, .tok = {.prompt = 10, .completion = 20}},
};

/* ---- memory and buffers ---- */

static void *mock_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (!q) {
		fputs("mock-upstream: out of memory\n", stderr);
		abort();
	}
	return q;
}

static void *mock_xmalloc(size_t n)
{
	return mock_xrealloc(NULL, n);
}

static char *mock_strndup(const char *s, size_t n)
{
	char *d = mock_xmalloc(n + 1);

	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

static size_t mock_buf_pending(const struct mock_buf *b)
{
	return b->len - b->off;
}

static void mock_buf_reserve(struct mock_buf *b, size_t extra)
{
	size_t cap;

	if (b->len + extra < b->cap)
		return;
	if (b->off) {
		memmove(b->p, b->p + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		b->p[b->len] = 0;
		if (b->len + extra < b->cap)
			return;
	}
	cap = b->cap ? b->cap : 256;
	while (cap <= b->len + extra)
		cap *= 2;
	b->p = mock_xrealloc(b->p, cap);
	b->cap = cap;
	b->p[b->len] = 0;   /* a buffer reserved for an empty body reads as "" */
}

static void mock_buf_append(struct mock_buf *b, const void *data, size_t n)
{
	mock_buf_reserve(b, n);
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
}

__attribute__((format(printf, 2, 3)))
static void mock_buf_printf(struct mock_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	mock_buf_reserve(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

/* Empties a buffer, giving memory back when a large body made it grow. */
static void mock_buf_clear(struct mock_buf *b)
{
	if (b->cap > MOCK_BUF_KEEP) {
		free(b->p);
		b->p = NULL;
		b->cap = 0;
	}
	b->off = b->len = 0;
	if (b->p)
		b->p[0] = 0;
}

static void mock_buf_free(struct mock_buf *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static const char *mock_buf_str(const struct mock_buf *b)
{
	return b->p ? b->p : "";
}

/* ---- small helpers ---- */

/* Strict decimal: digits only, no sign, no overflow. */
static int mock_parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0 || n > 20)
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* A service tier name, [a-z_]{1,16}, into out (NUL-terminated). */
static int mock_parse_tier(const char *s, size_t n, char out[MOCK_TIER_MAX + 1])
{
	size_t i;

	if (n == 0 || n > MOCK_TIER_MAX)
		return -1;
	for (i = 0; i < n; i++)
		if ((s[i] < 'a' || s[i] > 'z') && s[i] != '_')
			return -1;
	memcpy(out, s, n);
	out[n] = 0;
	return 0;
}

/* What no single knob's range can say: NULL when the knobs agree, else why not. */
static const char *mock_params_check(const struct mock_params *p)
{
	if (p->cls.cache_1h > p->tok.cache_creation)
		return "cache-1h-tokens exceeds cache-creation-tokens";
	return NULL;
}

static int mock_utf8_check(const unsigned char *s, size_t n)
{
	size_t i = 0, k, m;
	uint32_t cp, min;

	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if ((s[i] & 0xe0) == 0xc0) {
			k = 1, cp = s[i] & 0x1f, min = 0x80;
		} else if ((s[i] & 0xf0) == 0xe0) {
			k = 2, cp = s[i] & 0x0f, min = 0x800;
		} else if ((s[i] & 0xf8) == 0xf0) {
			k = 3, cp = s[i] & 0x07, min = 0x10000;
		} else {
			return 0;
		}
		if (n - i <= k)
			return 0;
		for (m = 1; m <= k; m++) {
			if ((s[i + m] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + m] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += k + 1;
	}
	return 1;
}

/* A JSON-safe copy of header bytes: as is when UTF-8, else read as Latin-1 (lossless). */
static char *mock_text_dup(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	char *d, *q;
	size_t i;

	if (mock_utf8_check(u, n))
		return mock_strndup(s, n);
	d = q = mock_xmalloc(2 * n + 1);
	for (i = 0; i < n; i++) {
		if (u[i] < 0x80) {
			*q++ = (char)u[i];
		} else {
			*q++ = (char)(0xc0 | u[i] >> 6);
			*q++ = (char)(0x80 | (u[i] & 0x3f));
		}
	}
	*q = 0;
	return d;
}

/* Numbers go in raw so that 64-bit counts print as exact integers. */
static void mock_json_add_uint(cJSON *o, const char *name, uint64_t v)
{
	char num[24];

	snprintf(num, sizeof num, "%llu", (unsigned long long)v);
	cJSON_AddRawToObject(o, name, num);
}

/* One count of a usage details object; kept: emitted even when zero. */
struct mock_count {
	const char *name;
	uint64_t v;
	int kept;
};

/* Adds details object name to usage u with its counts, zeros left out unless kept;
 * nothing at all when no count is left (providers omit what was not used). */
static void mock_details_add(cJSON *u, const char *name, const struct mock_count *c, size_t n)
{
	cJSON *d = NULL;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!c[i].v && !c[i].kept)
			continue;
		if (!d)
			d = cJSON_AddObjectToObject(u, name);
		mock_json_add_uint(d, c[i].name, c[i].v);
	}
}

static char *mock_json_leaf(const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);

	if (!s) {
		fputs("mock-upstream: cannot render JSON\n", stderr);
		abort();
	}
	return s;
}

/* o as x-mock-pretty lays it out: 1 as Python's json.dumps (", " and ": " on one line),
 * 2 as json.dumps(indent=2) (a member per line). Upstreams written in Python answer so. */
static void mock_json_write(struct mock_buf *b, const cJSON *o, uint64_t pretty, unsigned depth)
{
	int obj = cJSON_IsObject(o);
	const cJSON *m;
	cJSON *key;
	char *s;

	if (!obj && !cJSON_IsArray(o)) {
		s = mock_json_leaf(o);
		mock_buf_append(b, s, strlen(s));
		free(s);
		return;
	}
	mock_buf_append(b, obj ? "{" : "[", 1);
	for (m = o->child; m; m = m->next) {
		if (pretty == 2)
			mock_buf_printf(b, "\n%*s", (int)(depth + 1) * 2, "");
		if (obj) {
			key = cJSON_CreateString(m->string);
			s = mock_json_leaf(key);
			mock_buf_printf(b, "%s: ", s);
			free(s);
			cJSON_Delete(key);
		}
		mock_json_write(b, m, pretty, depth + 1);
		if (m->next)
			mock_buf_append(b, ", ", pretty == 2 ? 1 : 2);
	}
	if (pretty == 2 && o->child)
		mock_buf_printf(b, "\n%*s", (int)depth * 2, "");
	mock_buf_append(b, obj ? "}" : "]", 1);
}

/* o rendered as job j's x-mock-pretty says, and freed. */
static char *mock_json_print(const struct mock_job *j, cJSON *o)
{
	struct mock_buf b = {0};
	char *s;

	if (!j->p.pretty) {
		s = mock_json_leaf(o);
		cJSON_Delete(o);
		return s;
	}
	mock_json_write(&b, o, j->p.pretty, 0);
	cJSON_Delete(o);
	return b.p;
}

/* The last member named name, as Python's json (OpenAI, vLLM) reads duplicated keys;
 * cJSON's own lookup returns the first. */
static const cJSON *mock_json_last(const cJSON *obj, const char *name)
{
	const cJSON *c, *last = NULL;

	if (!cJSON_IsObject(obj))
		return NULL;
	for (c = obj->child; c; c = c->next)
		if (c->string && strcmp(c->string, name) == 0)
			last = c;
	return last;
}

static const char *mock_word_format(char buf[24], unsigned i)
{
	snprintf(buf, 24, "mock%u ", i);
	return buf;
}

static const char *mock_status_reason(unsigned status)
{
	const char *s = http_status_str((enum http_status)status);

	return strcmp(s, "<unknown>") ? s : "Unknown";
}

/* ---- API families ---- */

static const struct mock_errtype {
	unsigned status;
	const char *openai_type, *openai_code, *anthropic_type;
} mock_errtypes[] = {
	{401, "invalid_request_error", "invalid_api_key", "authentication_error"},
	{403, "invalid_request_error", NULL, "permission_error"},
	{404, "invalid_request_error", NULL, "not_found_error"},
	{413, "invalid_request_error", NULL, "request_too_large"},
	{429, "requests", "rate_limit_exceeded", "rate_limit_error"},
	{529, "server_error", NULL, "overloaded_error"},
};

static const struct mock_errtype *mock_errtype_find(unsigned status)
{
	static const struct mock_errtype client = {400, "invalid_request_error", NULL,
	                                           "invalid_request_error"};
	static const struct mock_errtype server = {500, "server_error", NULL, "api_error"};
	size_t i;

	for (i = 0; i < sizeof mock_errtypes / sizeof mock_errtypes[0]; i++)
		if (mock_errtypes[i].status == status)
			return &mock_errtypes[i];
	return status >= 500 ? &server : &client;
}

static cJSON *openai_error_render(unsigned status, const char *msg)
{
	const struct mock_errtype *t = mock_errtype_find(status);
	cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");

	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "type", t->openai_type);
	cJSON_AddNullToObject(e, "param");
	if (t->openai_code)
		cJSON_AddStringToObject(e, "code", t->openai_code);
	else
		cJSON_AddNullToObject(e, "code");
	return o;
}

/* Chat and legacy completions usage, unary and streamed: the counts, then each details
 * object with the classes its count includes. */
static cJSON *openai_usage_new(const struct mock_job *j)
{
	const struct mock_tokens *t = &j->p.tok;
	const struct mock_classes *k = &j->p.cls;
	const struct mock_count prompt[] = {
		{"cached_tokens", t->cached, 0},
		{"audio_tokens", k->audio_input, 0},
		{"cache_write_tokens", k->cache_write, 0},
	};
	const struct mock_count completion[] = {
		{"reasoning_tokens", t->reasoning, 0},
		{"audio_tokens", k->audio_output, 0},
		{"accepted_prediction_tokens", k->accepted, 0},
		{"rejected_prediction_tokens", k->rejected, 0},
	};
	cJSON *u = cJSON_CreateObject();

	mock_json_add_uint(u, "prompt_tokens", t->prompt);
	mock_json_add_uint(u, "completion_tokens", t->completion);
	mock_json_add_uint(u, "total_tokens", t->prompt + t->completion);
	mock_details_add(u, "prompt_tokens_details", prompt, sizeof prompt / sizeof prompt[0]);
	mock_details_add(u, "completion_tokens_details", completion,
	                 sizeof completion / sizeof completion[0]);
	return u;
}

static cJSON *openai_object_new(const struct mock_job *j, const char *object)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "id", j->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddRawToObject(o, "created", MOCK_CREATED);
	cJSON_AddStringToObject(o, "model", j->model);
	/* The tier the request was served at: in the object and in every chunk. */
	if (j->p.service_tier[0])
		cJSON_AddStringToObject(o, "service_tier", j->p.service_tier);
	return o;
}

/* The choice object appended to o's "choices" array. */
static cJSON *openai_choice_add(cJSON *o)
{
	cJSON *c = cJSON_CreateObject();

	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
	cJSON_AddNumberToObject(c, "index", 0);
	return c;
}

static cJSON *openai_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = openai_object_new(j, "chat.completion"), *c = openai_choice_add(o);
	cJSON *m = cJSON_AddObjectToObject(c, "message");

	cJSON_AddStringToObject(m, "role", "assistant");
	cJSON_AddStringToObject(m, "content", text);
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddStringToObject(c, "finish_reason", "stop");
	cJSON_AddItemToObject(o, "usage", openai_usage_new(j));
	cJSON_AddStringToObject(o, "system_fingerprint", "fp_mock");
	return o;
}

/* The end of stream chunk o with choice c: its finish reason when last, and, as OpenAI
 * marks every chunk once the client asked for usage, "usage": null. */
static void openai_chunk_end(const struct mock_job *j, cJSON *o, cJSON *c, int last)
{
	cJSON_AddNullToObject(c, "logprobs");
	if (last)
		cJSON_AddStringToObject(c, "finish_reason", "stop");
	else
		cJSON_AddNullToObject(c, "finish_reason");
	if (j->include_usage)
		cJSON_AddNullToObject(o, "usage");
}

/* A chat.completion.chunk: content frame i, or the closing chunk when content is NULL. */
static cJSON *openai_chunk_new(const struct mock_job *j, unsigned i, const char *content)
{
	cJSON *o = openai_object_new(j, "chat.completion.chunk"), *c, *d;

	cJSON_AddStringToObject(o, "system_fingerprint", "fp_mock");
	c = openai_choice_add(o);
	d = cJSON_AddObjectToObject(c, "delta");
	if (content && i == 0)
		cJSON_AddStringToObject(d, "role", "assistant");
	if (content)
		cJSON_AddStringToObject(d, "content", content);
	openai_chunk_end(j, o, c, content == NULL);
	return o;
}

/* The events of an OpenAI-style stream: content frames, the closing chunk, the usage
 * chunk when the client asked for it, [DONE]. chunk(j, i, text) makes frame i, or the
 * closing chunk when text is NULL; object names the usage chunk. */
static char *openai_stream_event(const struct mock_job *j, enum mock_part part, unsigned i,
                                 cJSON *(*chunk)(const struct mock_job *, unsigned, const char *),
                                 const char *object)
{
	char word[24];
	cJSON *o;

	if (part == PART_FRAME)
		return mock_json_print(j, chunk(j, i, mock_word_format(word, i)));
	if (part == PART_HEAD)
		return NULL;
	if (i == 0)
		return mock_json_print(j, chunk(j, 0, NULL));
	if (i == 1 && j->include_usage) {
		o = openai_object_new(j, object);
		if (chunk == openai_chunk_new)
			cJSON_AddStringToObject(o, "system_fingerprint", "fp_mock");
		cJSON_AddArrayToObject(o, "choices");
		cJSON_AddItemToObject(o, "usage", openai_usage_new(j));
		return mock_json_print(j, o);
	}
	if (i == 1u + (unsigned)j->include_usage)
		return mock_strndup("[DONE]", 6);
	return NULL;
}

static char *openai_event_render(const struct mock_job *j, enum mock_part part, unsigned i,
                                 const char **name)
{
	*name = NULL;
	return openai_stream_event(j, part, i, openai_chunk_new, "chat.completion.chunk");
}

/* Legacy completions (/v1/completions): text choices, usage as in chat. */
static cJSON *completions_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = openai_object_new(j, "text_completion"), *c = openai_choice_add(o);

	cJSON_AddStringToObject(c, "text", text);
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddStringToObject(c, "finish_reason", "stop");
	cJSON_AddItemToObject(o, "usage", openai_usage_new(j));
	return o;
}

/* A text_completion chunk: text frame i, or the closing chunk when text is NULL. */
static cJSON *completions_chunk_new(const struct mock_job *j, unsigned i, const char *text)
{
	cJSON *o = openai_object_new(j, "text_completion"), *c = openai_choice_add(o);

	(void)i;
	cJSON_AddStringToObject(c, "text", text ? text : "");
	openai_chunk_end(j, o, c, text == NULL);
	return o;
}

static char *completions_event_render(const struct mock_job *j, enum mock_part part, unsigned i,
                                      const char **name)
{
	*name = NULL;
	return openai_stream_event(j, part, i, completions_chunk_new, "text_completion");
}

/* Embeddings (/v1/embeddings): one vector, as long as the text is in bytes / 8 (so that
 * frames and body-bytes make it longer), its numbers a function of their index; usage
 * has prompt tokens only. */
static cJSON *embeddings_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject(), *v, *u;
	size_t i, n = strlen(text) / 8 + 1;

	cJSON_AddStringToObject(o, "object", "list");
	cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), e);
	cJSON_AddStringToObject(e, "object", "embedding");
	cJSON_AddNumberToObject(e, "index", 0);
	v = cJSON_AddArrayToObject(e, "embedding");
	for (i = 0; i < n; i++)
		cJSON_AddItemToArray(v, cJSON_CreateNumber((double)((int)(i * 7919 % 2001) - 1000) / 1000));
	cJSON_AddStringToObject(o, "model", j->model);
	u = cJSON_AddObjectToObject(o, "usage");
	mock_json_add_uint(u, "prompt_tokens", j->p.tok.prompt);
	mock_json_add_uint(u, "total_tokens", j->p.tok.prompt);
	return o;
}

/* Anthropic's token count (/v1/messages/count_tokens): the prompt tokens, nothing else. */
static cJSON *count_tokens_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = cJSON_CreateObject();

	(void)text;
	mock_json_add_uint(o, "input_tokens", j->p.tok.prompt);
	return o;
}

/* The Responses API (/v1/responses). A response object: the finished one (text, its
 * end as response-end says, usage last), or the empty one the first events carry. */
static const char *const responses_status[] = {"completed", "incomplete", "failed"};

/* The answer's output_text part, its text so far ("" before any delta). */
static cJSON *responses_part_new(const char *text)
{
	cJSON *part = cJSON_CreateObject();

	cJSON_AddStringToObject(part, "type", "output_text");
	cJSON_AddStringToObject(part, "text", text);
	cJSON_AddArrayToObject(part, "annotations");
	return part;
}

/* The answer's message item: done with its text, or in progress and empty (NULL). */
static cJSON *responses_item_new(const struct mock_job *j, const char *text)
{
	cJSON *item = cJSON_CreateObject(), *content;
	char id[64];

	snprintf(id, sizeof id, "msg_%s", j->id + 5);
	cJSON_AddStringToObject(item, "id", id);
	cJSON_AddStringToObject(item, "type", "message");
	cJSON_AddStringToObject(item, "role", "assistant");
	cJSON_AddStringToObject(item, "status", text ? "completed" : "in_progress");
	content = cJSON_AddArrayToObject(item, "content");
	if (text)
		cJSON_AddItemToArray(content, responses_part_new(text));
	return item;
}

/* A finished response's usage, unary and streamed: cached and reasoning tokens always
 * (as OpenAI sends them), cache writes when there are some. */
static cJSON *responses_usage_new(const struct mock_job *j)
{
	const struct mock_tokens *t = &j->p.tok;
	const struct mock_count input[] = {
		{"cached_tokens", t->cached, 1},
		{"cache_write_tokens", j->p.cls.cache_write, 0},
	};
	const struct mock_count output[] = {{"reasoning_tokens", t->reasoning, 1}};
	cJSON *u = cJSON_CreateObject();

	mock_json_add_uint(u, "input_tokens", t->prompt);
	mock_details_add(u, "input_tokens_details", input, sizeof input / sizeof input[0]);
	mock_json_add_uint(u, "output_tokens", t->completion);
	mock_details_add(u, "output_tokens_details", output, sizeof output / sizeof output[0]);
	mock_json_add_uint(u, "total_tokens", t->prompt + t->completion);
	return u;
}

/* A web search the Responses API ran: an output item before the message (OpenAI counts
 * them nowhere in the usage). */
static cJSON *responses_search_new(const struct mock_job *j, unsigned k)
{
	cJSON *item = cJSON_CreateObject();
	char id[80];

	snprintf(id, sizeof id, "ws_%s_%u", j->id + 5, k);
	cJSON_AddStringToObject(item, "type", "web_search_call");
	cJSON_AddStringToObject(item, "id", id);
	cJSON_AddStringToObject(item, "status", "completed");
	return item;
}

/* Member name echoed from the request as it was sent (its last occurrence), or dflt (raw
 * JSON) when the request has none: OpenAI echoes every setting, its default if unset. */
static void responses_echo_add(const struct mock_job *j, cJSON *o, const char *name,
                               const char *dflt)
{
	const cJSON *v = mock_json_last(j->echo, name);

	if (v)
		cJSON_AddItemToObject(o, name, cJSON_Duplicate(v, 1));
	else if (dflt[0] == '{') /* parsed, so that x-mock-pretty lays it out too */
		cJSON_AddItemToObject(o, name, cJSON_Parse(dflt));
	else
		cJSON_AddRawToObject(o, name, dflt);
}

/* In OpenAI's member order, where the echoed request surrounds the usage: instructions
 * before the model, text and tools between the output and the usage, user and metadata
 * after the usage. */
static cJSON *responses_object_new(const struct mock_job *j, const char *text)
{
	static const char *const before[][2] = {
		{"parallel_tool_calls", "true"}, {"previous_response_id", "null"},
		{"reasoning", "{\"effort\":null,\"summary\":null}"},
	};
	static const char *const after[][2] = {
		{"store", "true"}, {"temperature", "1.0"}, {"text", "{\"format\":{\"type\":\"text\"}}"},
		{"tool_choice", "\"auto\""}, {"tools", "[]"}, {"top_logprobs", "0"}, {"top_p", "1.0"},
		{"truncation", "\"disabled\""},
	};
	cJSON *o = cJSON_CreateObject(), *out, *u;
	uint64_t k;
	size_t i;

	cJSON_AddStringToObject(o, "id", j->id);
	cJSON_AddStringToObject(o, "object", "response");
	cJSON_AddRawToObject(o, "created_at", MOCK_CREATED);
	cJSON_AddStringToObject(o, "status", text ? responses_status[j->p.response_end] : "in_progress");
	responses_echo_add(j, o, "background", "false");
	if (text && j->p.response_end == 2) {
		u = cJSON_AddObjectToObject(o, "error");
		cJSON_AddStringToObject(u, "code", "server_error");
		cJSON_AddStringToObject(u, "message", "The mock failed this response.");
	} else {
		cJSON_AddNullToObject(o, "error");
	}
	if (text && j->p.response_end == 1)
		cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
		                        "max_output_tokens");
	else
		cJSON_AddNullToObject(o, "incomplete_details");
	responses_echo_add(j, o, "instructions", "null");
	responses_echo_add(j, o, "max_output_tokens", "null");
	responses_echo_add(j, o, "max_tool_calls", "null");
	cJSON_AddStringToObject(o, "model", j->model);
	out = cJSON_AddArrayToObject(o, "output");
	for (i = 0; i < sizeof before / sizeof before[0]; i++)
		responses_echo_add(j, o, before[i][0], before[i][1]);
	if (j->p.service_tier[0])
		cJSON_AddStringToObject(o, "service_tier", j->p.service_tier);
	for (i = 0; i < sizeof after / sizeof after[0]; i++)
		responses_echo_add(j, o, after[i][0], after[i][1]);
	if (text) {
		for (k = 0; k < j->p.cls.web_search; k++)
			cJSON_AddItemToArray(out, responses_search_new(j, (unsigned)k));
		cJSON_AddItemToArray(out, responses_item_new(j, text));
		cJSON_AddItemToObject(o, "usage", responses_usage_new(j));
	} else {
		cJSON_AddNullToObject(o, "usage");
	}
	responses_echo_add(j, o, "user", "null");
	responses_echo_add(j, o, "metadata", "{}");
	return o;
}

static cJSON *responses_unary_render(const struct mock_job *j, const char *text)
{
	return responses_object_new(j, text);
}

/* /v1/responses/compact: the conversation compacted into one opaque item, with the usage
 * of doing it (billable, as the Responses API's). */
static cJSON *compact_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = responses_object_new(j, text), *out = cJSON_CreateArray(), *item;

	cJSON_ReplaceItemInObject(o, "object", cJSON_CreateString("response.compaction"));
	item = cJSON_CreateObject();
	cJSON_AddStringToObject(item, "type", "compaction");
	cJSON_AddStringToObject(item, "encrypted_content", "mock-compacted");
	cJSON_AddItemToArray(out, item);
	cJSON_ReplaceItemInObject(o, "output", out);
	return o;
}

/* A stored response's paths. The mock keeps nothing: any id is a response it made,
 * finished, with the usage the knobs say (a gateway must not bill it again). */
static cJSON *stored_render(const struct mock_job *j)
{
	cJSON *o;

	switch (j->stored) {
	case STORED_DELETE:
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "id", j->id);
		cJSON_AddStringToObject(o, "object", "response");
		cJSON_AddTrueToObject(o, "deleted");
		return o;
	case STORED_INPUT_ITEMS:
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "object", "list");
		cJSON_AddArrayToObject(o, "data");
		cJSON_AddNullToObject(o, "first_id");
		cJSON_AddNullToObject(o, "last_id");
		cJSON_AddFalseToObject(o, "has_more");
		return o;
	case STORED_CANCEL:
		o = responses_object_new(j, "stored");
		cJSON_ReplaceItemInObject(o, "status", cJSON_CreateString("cancelled"));
		return o;
	default:
		return responses_object_new(j, "stored");
	}
}

/* /v1/responses/input_tokens: the count of the request's input, nothing billed. */
static cJSON *input_tokens_unary_render(const struct mock_job *j, const char *text)
{
	cJSON *o = cJSON_CreateObject();

	(void)text;
	cJSON_AddStringToObject(o, "object", "response.input_tokens");
	mock_json_add_uint(o, "input_tokens", j->p.tok.prompt);
	return o;
}

/* A stream: response.created and .in_progress, the message item and its text part
 * added, one output_text.delta per frame, the text, part and item done, then the
 * terminal event (response.completed, .incomplete or .failed) with the whole response
 * and its usage. Every event is named and carries its type and sequence number. */
static char *responses_event_render(const struct mock_job *j, enum mock_part part, unsigned i,
                                    const char **name)
{
	static const char *const head[] = {"response.created", "response.in_progress",
	                                   "response.output_item.added",
	                                   "response.content_part.added"};
	static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
	                                   "response.output_item.done"};
	static const char *const end[] = {"response.completed", "response.incomplete", "response.failed"};
	unsigned searches = (unsigned)j->p.cls.web_search;
	struct mock_buf text = {0};
	char word[24], item_id[80];
	cJSON *o;
	unsigned k, seq;

	if (part == PART_HEAD && i < 4) {
		*name = head[i];
		seq = i;
	} else if (part == PART_HEAD && i < 4 + searches) {
		/* The web searches, each done before the message starts. */
		*name = "response.web_search_call.completed";
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "type", *name);
		mock_json_add_uint(o, "sequence_number", i);
		mock_json_add_uint(o, "output_index", i - 4);
		snprintf(item_id, sizeof item_id, "ws_%s_%u", j->id + 5, i - 4);
		cJSON_AddStringToObject(o, "item_id", item_id);
		return mock_json_print(j, o);
	} else if (part == PART_FRAME) {
		*name = "response.output_text.delta";
		seq = 4 + searches + i;
	} else if (part == PART_TAIL && i < 4) {
		*name = i < 3 ? tail[i] : end[j->p.response_end];
		seq = 4 + searches + (unsigned)j->p.frames + i;
	} else {
		return NULL;
	}
	snprintf(item_id, sizeof item_id, "msg_%s", j->id + 5);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", *name);
	mock_json_add_uint(o, "sequence_number", seq);
	if (part == PART_HEAD && i < 2) {
		cJSON_AddItemToObject(o, "response", responses_object_new(j, NULL));
		return mock_json_print(j, o);
	}
	if (part != PART_TAIL || i < 3) {
		cJSON_AddNumberToObject(o, "output_index", 0);
		if (part != PART_HEAD || i != 2)
			cJSON_AddStringToObject(o, "item_id", item_id);
		if (part != PART_HEAD || i != 2)
			cJSON_AddNumberToObject(o, "content_index", 0);
	}
	if (part == PART_FRAME) {
		cJSON_AddStringToObject(o, "delta", mock_word_format(word, i));
		return mock_json_print(j, o);
	}
	if (part == PART_HEAD) {
		if (i == 2)
			cJSON_AddItemToObject(o, "item", responses_item_new(j, NULL));
		else
			cJSON_AddItemToObject(o, "part", responses_part_new(""));
		return mock_json_print(j, o);
	}
	mock_buf_append(&text, "", 0);
	for (k = 0; k < j->p.frames; k++) {
		mock_word_format(word, k);
		mock_buf_append(&text, word, strlen(word));
	}
	if (i == 0)
		cJSON_AddStringToObject(o, "text", text.p);
	else if (i == 1)
		cJSON_AddItemToObject(o, "part", responses_part_new(text.p));
	else if (i == 2)
		cJSON_AddItemToObject(o, "item", responses_item_new(j, text.p));
	else
		cJSON_AddItemToObject(o, "response", responses_object_new(j, text.p));
	mock_buf_free(&text);
	return mock_json_print(j, o);
}

static cJSON *anthropic_error_render(unsigned status, const char *msg)
{
	cJSON *o = cJSON_CreateObject(), *e;

	cJSON_AddStringToObject(o, "type", "error");
	e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "type", mock_errtype_find(status)->anthropic_type);
	cJSON_AddStringToObject(e, "message", msg);
	return o;
}

/* server_tool_use, in the final usage only (the unary one or message_delta's). */
static void anthropic_tools_add(const struct mock_job *j, cJSON *u)
{
	const struct mock_count tools[] = {{"web_search_requests", j->p.cls.web_search, 0}};

	mock_details_add(u, "server_tool_use", tools, sizeof tools / sizeof tools[0]);
}

/* A message's usage: the unary one (final), or the one message_start carries. The cache
 * writes split by lifetime only once some are 1h (never more than all of them, see
 * mock_params_check): without the split they read as all 5m, as before it existed. */
static cJSON *anthropic_usage_new(const struct mock_job *j, uint64_t output, int final)
{
	const struct mock_tokens *t = &j->p.tok;
	const struct mock_count split[] = {
		{"ephemeral_5m_input_tokens", t->cache_creation - j->p.cls.cache_1h, 1},
		{"ephemeral_1h_input_tokens", j->p.cls.cache_1h, 1},
	};
	cJSON *u = cJSON_CreateObject();

	mock_json_add_uint(u, "input_tokens", t->prompt);
	if (t->cached || t->cache_creation) {
		mock_json_add_uint(u, "cache_creation_input_tokens", t->cache_creation);
		mock_json_add_uint(u, "cache_read_input_tokens", t->cached);
	}
	if (j->p.cls.cache_1h)
		mock_details_add(u, "cache_creation", split, sizeof split / sizeof split[0]);
	mock_json_add_uint(u, "output_tokens", output);
	if (final)
		anthropic_tools_add(j, u);
	if (j->p.service_tier[0])
		cJSON_AddStringToObject(u, "service_tier", j->p.service_tier);
	return u;
}

/* A message object: the finished answer, or the empty one message_start carries. */
static cJSON *anthropic_message_new(const struct mock_job *j, const char *text, uint64_t output)
{
	cJSON *o = cJSON_CreateObject(), *content, *block;

	cJSON_AddStringToObject(o, "id", j->id);
	cJSON_AddStringToObject(o, "type", "message");
	cJSON_AddStringToObject(o, "role", "assistant");
	cJSON_AddStringToObject(o, "model", j->model);
	content = cJSON_AddArrayToObject(o, "content");
	if (text) {
		block = cJSON_CreateObject();
		cJSON_AddStringToObject(block, "type", "text");
		cJSON_AddStringToObject(block, "text", text);
		cJSON_AddItemToArray(content, block);
		cJSON_AddStringToObject(o, "stop_reason", "end_turn");
	} else {
		cJSON_AddNullToObject(o, "stop_reason");
	}
	cJSON_AddNullToObject(o, "stop_sequence");
	cJSON_AddItemToObject(o, "usage", anthropic_usage_new(j, output, text != NULL));
	return o;
}

static cJSON *anthropic_unary_render(const struct mock_job *j, const char *text)
{
	return anthropic_message_new(j, text, j->p.tok.completion);
}

enum anthropic_kind {
	A_MSG_START, A_BLOCK_START, A_BLOCK_DELTA, A_BLOCK_STOP, A_MSG_DELTA, A_MSG_STOP
};

static char *anthropic_event_render(const struct mock_job *j, enum mock_part part, unsigned i,
                                    const char **name)
{
	static const char *const names[] = {"message_start", "content_block_start",
	                                    "content_block_delta", "content_block_stop",
	                                    "message_delta", "message_stop"};
	enum anthropic_kind kind;
	char word[24];
	cJSON *o, *x;

	if (part == PART_FRAME)
		kind = A_BLOCK_DELTA;
	else if (part == PART_HEAD && i <= A_BLOCK_START)
		kind = (enum anthropic_kind)i;
	else if (part == PART_TAIL && i <= A_MSG_STOP - A_BLOCK_STOP)
		kind = (enum anthropic_kind)(A_BLOCK_STOP + i);
	else
		return NULL;
	*name = names[kind];
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", names[kind]);
	switch (kind) {
	case A_MSG_START:
		/* Like the real API: message_start reports a token or so of output so far. */
		cJSON_AddItemToObject(o, "message", anthropic_message_new(j, NULL,
		                      j->p.tok.completion < 1 ? j->p.tok.completion : 1));
		break;
	case A_BLOCK_START:
		cJSON_AddNumberToObject(o, "index", 0);
		x = cJSON_AddObjectToObject(o, "content_block");
		cJSON_AddStringToObject(x, "type", "text");
		cJSON_AddStringToObject(x, "text", "");
		break;
	case A_BLOCK_DELTA:
		cJSON_AddNumberToObject(o, "index", 0);
		x = cJSON_AddObjectToObject(o, "delta");
		cJSON_AddStringToObject(x, "type", "text_delta");
		cJSON_AddStringToObject(x, "text", mock_word_format(word, i));
		break;
	case A_BLOCK_STOP:
		cJSON_AddNumberToObject(o, "index", 0);
		break;
	case A_MSG_DELTA:
		x = cJSON_AddObjectToObject(o, "delta");
		cJSON_AddStringToObject(x, "stop_reason", "end_turn");
		cJSON_AddNullToObject(x, "stop_sequence");
		x = cJSON_AddObjectToObject(o, "usage");
		mock_json_add_uint(x, "output_tokens", j->p.tok.completion);
		anthropic_tools_add(j, x);
		break;
	case A_MSG_STOP:
		break;
	}
	return mock_json_print(j, o);
}

static const struct mock_api mock_openai = {
	"chatcmpl-mock", openai_unary_render, openai_event_render, openai_error_render,
};
static const struct mock_api mock_completions = {
	"cmpl-mock", completions_unary_render, completions_event_render, openai_error_render,
};
static const struct mock_api mock_embeddings = {
	"emb-mock", embeddings_unary_render, NULL, openai_error_render,
};
static const struct mock_api mock_count_tokens = {
	"count-mock", count_tokens_unary_render, NULL, anthropic_error_render,
};
static const struct mock_api mock_responses = {
	"resp_mock", responses_unary_render, responses_event_render, openai_error_render,
};
static const struct mock_api mock_compact = {
	"resp_mock", compact_unary_render, NULL, openai_error_render,
};
static const struct mock_api mock_input_tokens = {
	"resp_mock", input_tokens_unary_render, NULL, openai_error_render,
};
static const struct mock_api mock_anthropic = {
	"msg_mock", anthropic_unary_render, anthropic_event_render, anthropic_error_render,
};

/* ---- request log and introspection ---- */

static const struct mock_hdr *mock_req_header_find(const struct mock_req *r, const char *name)
{
	size_t i, n = strlen(name);

	for (i = 0; i < r->nhdrs; i++)
		if (r->hdrs[i].name_len == n && !strncasecmp(r->hbuf.p + r->hdrs[i].name_off, name, n))
			return &r->hdrs[i];
	return NULL;
}

static void mock_log_add(const struct mock_req *r)
{
	cJSON *rec = cJSON_CreateObject(), *hdrs, *pair;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0, k;
	char hex[2 * EVP_MAX_MD_SIZE + 1], *s;
	cJSON **slot;
	size_t i;

	mock_json_add_uint(rec, "seq", ++mock.log_seq);
	cJSON_AddStringToObject(rec, "method", http_method_str((enum http_method)r->method));
	s = mock_text_dup(mock_buf_str(&r->url), r->url.len);
	cJSON_AddStringToObject(rec, "path", s);
	free(s);
	hdrs = cJSON_AddArrayToObject(rec, "headers");
	for (i = 0; i < r->nhdrs; i++) {
		pair = cJSON_CreateArray();
		s = mock_text_dup(r->hbuf.p + r->hdrs[i].name_off, r->hdrs[i].name_len);
		cJSON_AddItemToArray(pair, cJSON_CreateString(s));
		free(s);
		s = mock_text_dup(r->hbuf.p + r->hdrs[i].value_off, r->hdrs[i].value_len);
		cJSON_AddItemToArray(pair, cJSON_CreateString(s));
		free(s);
		cJSON_AddItemToArray(hdrs, pair);
	}
	mock_json_add_uint(rec, "body_len", r->body.len);
	EVP_Digest(mock_buf_str(&r->body), r->body.len, md, &mdlen, EVP_sha256(), NULL);
	for (k = 0; k < mdlen; k++)
		snprintf(hex + 2 * k, 3, "%02x", md[k]);
	hex[2 * mdlen] = 0;
	cJSON_AddStringToObject(rec, "body_sha256", hex);
	if (r->body.len <= MOCK_TEXT_MAX && !memchr(mock_buf_str(&r->body), 0, r->body.len) &&
	    mock_utf8_check((const unsigned char *)mock_buf_str(&r->body), r->body.len))
		cJSON_AddStringToObject(rec, "body", mock_buf_str(&r->body));
	else
		cJSON_AddNullToObject(rec, "body");
	slot = &mock.log[(mock.log_seq - 1) % MOCK_LOG_SIZE];
	cJSON_Delete(*slot);
	*slot = rec;
}

static cJSON *mock_log_render(void)
{
	cJSON *a = cJSON_CreateArray();
	uint64_t seq = mock.log_seq > MOCK_LOG_SIZE ? mock.log_seq - MOCK_LOG_SIZE : 0;

	/* References: the array is deleted after printing, the records stay. */
	for (; seq < mock.log_seq; seq++)
		if (mock.log[seq % MOCK_LOG_SIZE])
			cJSON_AddItemReferenceToArray(a, mock.log[seq % MOCK_LOG_SIZE]);
	return a;
}

static cJSON *mock_log_clear(void)
{
	cJSON *o = cJSON_CreateObject();
	uint64_t n = 0;
	size_t i;

	for (i = 0; i < MOCK_LOG_SIZE; i++) {
		n += mock.log[i] != NULL;
		cJSON_Delete(mock.log[i]);
		mock.log[i] = NULL;
	}
	mock_json_add_uint(o, "cleared", n);
	return o;
}

static cJSON *mock_stats_render(void)
{
	cJSON *o = cJSON_CreateObject();
	const struct mock_conn *c;
	uint64_t buffered = 0;

	for (c = mock.conns; c; c = c->next)
		buffered += mock_buf_pending(&c->out);

	mock_json_add_uint(o, "requests", mock.stats.requests);
	mock_json_add_uint(o, "streams", mock.stats.streams);
	mock_json_add_uint(o, "bytes_out", mock.stats.bytes_out);
	mock_json_add_uint(o, "connections_total", mock.stats.conns_total);
	mock_json_add_uint(o, "connections_open", mock.stats.conns_open);
	mock_json_add_uint(o, "client_aborts", mock.stats.aborts);
	mock_json_add_uint(o, "forced_disconnects", mock.stats.disconnects);
	mock_json_add_uint(o, "output_buffered", buffered);
	mock_json_add_uint(o, "answering", mock.stats.answering);
	mock_json_add_uint(o, "answering_max", mock.stats.answering_max);
	return o;
}

static cJSON *mock_models_render(void)
{
	static const char *const ids[] = {"mock-model", "gpt-4o-mini", "gpt-4o",
	                                  "claude-3-5-haiku-latest", "claude-sonnet-4-5"};
	cJSON *o = cJSON_CreateObject(), *data, *m;
	size_t i;

	cJSON_AddStringToObject(o, "object", "list");
	data = cJSON_AddArrayToObject(o, "data");
	for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "id", ids[i]);
		cJSON_AddStringToObject(m, "object", "model");
		cJSON_AddRawToObject(m, "created", MOCK_CREATED);
		cJSON_AddStringToObject(m, "owned_by", "mock");
		cJSON_AddItemToArray(data, m);
	}
	return o;
}

/* ---- request parsing (http-parser callbacks) ---- */

static void mock_req_reset(struct mock_req *r)
{
	mock_buf_clear(&r->url);
	mock_buf_clear(&r->hbuf);
	mock_buf_clear(&r->body);
	r->nhdrs = 0;
	r->in_value = 0;
	r->head = 0;
	r->keep_alive = 0;
	r->http10 = 0;
}

static void mock_req_free(struct mock_req *r)
{
	mock_buf_free(&r->url);
	mock_buf_free(&r->hbuf);
	mock_buf_free(&r->body);
	free(r->hdrs);
}

static void mock_req_path_get(const struct mock_req *r, const char **path, size_t *n)
{
	struct http_parser_url u;

	http_parser_url_init(&u);
	*path = mock_buf_str(&r->url);
	*n = r->url.len;
	if (!http_parser_parse_url(*path, *n, r->method == HTTP_CONNECT, &u) &&
	    (u.field_set & (1 << UF_PATH))) {
		*path += u.field_data[UF_PATH].off;
		*n = u.field_data[UF_PATH].len;
	}
}

static int mock_on_message_begin(http_parser *p)
{
	struct mock_conn *c = p->data;

	mock_req_reset(&c->req);
	return 0;
}

static int mock_on_url(http_parser *p, const char *at, size_t n)
{
	struct mock_conn *c = p->data;

	mock_buf_append(&c->req.url, at, n);
	return 0;
}

/* Names and values may arrive in pieces: a field after a value starts a new header. */
static int mock_on_header_field(http_parser *p, const char *at, size_t n)
{
	struct mock_req *r = &((struct mock_conn *)p->data)->req;

	if (r->nhdrs == 0 || r->in_value) {
		if (r->nhdrs == r->hcap) {
			r->hcap = r->hcap ? 2 * r->hcap : 16;
			r->hdrs = mock_xrealloc(r->hdrs, r->hcap * sizeof *r->hdrs);
		}
		r->hdrs[r->nhdrs++] = (struct mock_hdr){r->hbuf.len, 0, r->hbuf.len, 0};
		r->in_value = 0;
	}
	mock_buf_append(&r->hbuf, at, n);
	r->hdrs[r->nhdrs - 1].name_len += n;
	return 0;
}

static int mock_on_header_value(http_parser *p, const char *at, size_t n)
{
	struct mock_req *r = &((struct mock_conn *)p->data)->req;

	if (!r->in_value) {
		r->hdrs[r->nhdrs - 1].value_off = r->hbuf.len;
		r->in_value = 1;
	}
	mock_buf_append(&r->hbuf, at, n);
	r->hdrs[r->nhdrs - 1].value_len += n;
	return 0;
}

static int mock_on_headers_complete(http_parser *p)
{
	struct mock_conn *c = p->data;
	const struct mock_hdr *h = mock_req_header_find(&c->req, "expect");

	c->req.method = p->method;
	c->req.head = p->method == HTTP_HEAD;
	if (p->content_length != ULLONG_MAX && p->content_length > MOCK_BODY_MAX) {
		c->abort_status = 413;
		return -1;
	}
	if (p->content_length != ULLONG_MAX)
		mock_buf_reserve(&c->req.body, (size_t)p->content_length);
	/* Parsing only runs between responses, so the interim answer cannot cut into one. */
	if (h && h->value_len == 12 && !strncasecmp(c->req.hbuf.p + h->value_off, "100-continue", 12) &&
	    p->http_minor >= 1)
		mock_buf_append(&c->out, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	return 0;
}

static int mock_on_body(http_parser *p, const char *at, size_t n)
{
	struct mock_conn *c = p->data;

	if (c->req.body.len + n > MOCK_BODY_MAX) {
		c->abort_status = 413;
		return -1;
	}
	mock_buf_append(&c->req.body, at, n);
	return 0;
}

/* Pausing hands the request to the connection; the parser resumes on the next one
 * only once this response has been produced, which keeps pipelined answers in order. */
static int mock_on_message_complete(http_parser *p)
{
	struct mock_conn *c = p->data;

	c->req.keep_alive = http_should_keep_alive(p);
	c->req.http10 = p->http_major == 1 && p->http_minor == 0;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings mock_settings = {
	.on_message_begin = mock_on_message_begin,
	.on_url = mock_on_url,
	.on_header_field = mock_on_header_field,
	.on_header_value = mock_on_header_value,
	.on_headers_complete = mock_on_headers_complete,
	.on_body = mock_on_body,
	.on_message_complete = mock_on_message_complete,
};

/* ---- responses ---- */

static void mock_job_clear(struct mock_job *j)
{
	free(j->model);
	cJSON_Delete(j->echo);
	memset(j, 0, sizeof *j);
	j->api = &mock_openai;
	j->p.disconnect_after = MOCK_NONE;
}

/* An API request's answer is complete, or its client left. */
static void mock_answered(struct mock_conn *c)
{
	if (c->answering) {
		c->answering = 0;
		mock.stats.answering--;
	}
}

static void mock_resp_done(struct mock_conn *c)
{
	mock_answered(c);
	c->phase = PHASE_IDLE;
	mock_job_clear(&c->job);
	if (!c->req.keep_alive)
		c->closing = 1;
}

/* length < 0: an event stream. */
static void mock_resp_head(struct mock_conn *c, unsigned status, const char *ctype,
                           long long length)
{
	struct mock_buf *o = &c->out;

	if (!mock.quiet)
		fprintf(stderr, "mock: %s %s -> %u\n", http_method_str((enum http_method)c->req.method),
		        mock_buf_str(&c->req.url), status);
	mock_buf_printf(o, "HTTP/1.1 %u %s\r\nContent-Type: %s\r\n", status, mock_status_reason(status),
	                ctype);
	if (length >= 0)
		mock_buf_printf(o, "Content-Length: %lld\r\n", length);
	else
		mock_buf_printf(o, "Cache-Control: no-cache\r\n%s",
		                c->job.chunked ? "Transfer-Encoding: chunked\r\n" : "");
	if (status == 429)
		mock_buf_printf(o, "Retry-After: 1\r\n");
	if (!c->req.keep_alive)
		mock_buf_printf(o, "Connection: close\r\n");
	else if (c->req.http10)
		mock_buf_printf(o, "Connection: keep-alive\r\n");
	mock_buf_append(o, "\r\n", 2);
}

/* Every non-stream answer ends here, x-mock-disconnect-after cutting its body. */
static void mock_resp_unary(struct mock_conn *c, unsigned status, const char *body, size_t n)
{
	uint64_t cut = c->job.p.disconnect_after;

	mock_resp_head(c, status, "application/json", (long long)n);
	if (c->req.head)
		n = 0;
	if (cut < n) {
		n = (size_t)cut;
		c->drop = 1;
	}
	mock_buf_append(&c->out, body, n);
	mock_resp_done(c);
}

static void mock_resp_json(struct mock_conn *c, unsigned status, cJSON *o)
{
	char *s = mock_json_print(&c->job, o);

	mock_resp_unary(c, status, s, strlen(s));
	free(s);
}

/* An error in the form x-mock-error-form asks for: the API's JSON with a length or
 * chunked, plain text with a length or delimited by the connection's close, or nothing. */
static void mock_resp_error(struct mock_conn *c, unsigned status, const char *msg)
{
	struct mock_buf *o = &c->out;
	char *s;

	switch (c->job.p.error_form) {
	case 1:
		s = mock_json_print(&c->job, c->job.api->error(status, msg));
		c->job.chunked = 1;
		mock_resp_head(c, status, "application/json", -1);
		mock_buf_printf(o, "%zx\r\n%s\r\n0\r\n\r\n", strlen(s), s);
		free(s);
		mock_resp_done(c);
		return;
	case 2:
		mock_resp_head(c, status, "text/plain", (long long)strlen(msg));
		mock_buf_append(o, msg, strlen(msg));
		mock_resp_done(c);
		return;
	case 3:
		mock_resp_head(c, status, "application/json", 0);
		mock_resp_done(c);
		return;
	case 4:
		c->job.chunked = 0;
		c->req.keep_alive = 0;
		mock_resp_head(c, status, "text/plain", -1);
		mock_buf_append(o, msg, strlen(msg));
		mock_resp_done(c);
		return;
	default:
		mock_resp_json(c, status, c->job.api->error(status, msg));
	}
}

static void mock_resp_completion(struct mock_conn *c)
{
	const struct mock_job *j = &c->job;
	struct mock_buf text = {0};
	char word[24], *body;
	size_t n;
	unsigned i;

	mock_buf_append(&text, "", 0);
	for (i = 0; i < j->p.frames; i++) {
		mock_word_format(word, i);
		mock_buf_append(&text, word, strlen(word));
	}
	body = mock_json_print(j, j->api->unary(j, text.p));
	n = strlen(body);
	/* Padding is plain ASCII, which JSON copies byte for byte: the size comes out exact. */
	if (j->p.body_bytes > n) {
		mock_buf_reserve(&text, (size_t)j->p.body_bytes - n);
		memset(text.p + text.len, 'x', (size_t)j->p.body_bytes - n);
		text.len += (size_t)j->p.body_bytes - n;
		text.p[text.len] = 0;
		free(body);
		body = mock_json_print(j, j->api->unary(j, text.p));
		n = strlen(body);
	}
	mock_resp_unary(c, 200, body, n);
	free(body);
	mock_buf_free(&text);
}

static void mock_stream_start(struct mock_conn *c)
{
	struct mock_job *j = &c->job;

	/* HTTP/1.0 has no chunked encoding: the end of the stream is the end of the connection. */
	j->chunked = !c->req.http10;
	if (c->req.http10)
		c->req.keep_alive = 0;
	mock_resp_head(c, 200, "text/event-stream", -1);
	mock.stats.streams++;
	j->part = PART_HEAD;
	j->idx = 0;
	j->due = 0;
	c->phase = PHASE_STREAM;
}

/* last: the stream's final event, which x-mock-sse-open leaves without its blank line.
 * Data of several lines (x-mock-pretty: 2) takes a data field per line: SSE joins them. */
static void mock_stream_write(struct mock_conn *c, const char *event, const char *data, int last)
{
	const char *eol = c->job.p.crlf ? "\r\n" : "\n";
	const char *end = last && c->job.p.sse_open ? "" : eol, *nl;
	struct mock_buf ev = {0};

	if (event)
		mock_buf_printf(&ev, "event: %s%s", event, eol);
	for (; (nl = strchr(data, '\n')); data = nl + 1)
		mock_buf_printf(&ev, "data: %.*s%s", (int)(nl - data), data, eol);
	mock_buf_printf(&ev, "data: %s%s%s", data, eol, end);
	if (c->job.chunked)
		mock_buf_printf(&c->out, "%zx\r\n", ev.len);
	mock_buf_append(&c->out, ev.p, ev.len);
	if (c->job.chunked)
		mock_buf_append(&c->out, "\r\n", 2);
	mock_buf_free(&ev);
}

/* A stream's delay of ms: the timer that ends it sets job.due. Returns 0 (wait). */
static int mock_stream_wait(struct mock_conn *c, uint64_t ms)
{
	if (!ev_is_active(&c->timer)) {
		ev_timer_set(&c->timer, (double)ms / 1000.0, 0);
		ev_timer_start(mock.loop, &c->timer);
	}
	return 0;
}

/* One step of a stream: one event written, a part finished, or 0 when it must wait
 * (for a delay or for the client to read). */
static int mock_stream_pump(struct mock_conn *c)
{
	struct mock_job *j = &c->job;
	const char *name;
	char *data;

	if (mock_buf_pending(&c->out) >= MOCK_OUT_HIGH)
		return 0;
	if (j->part == PART_FRAME) {
		if (j->idx == j->p.disconnect_after) {
			c->drop = 1;
			mock_resp_done(c);
			return 1;
		}
		if (j->idx == j->p.frames) {
			j->part = PART_TAIL;
			j->idx = 0;
			return 1;
		}
		if (j->p.frame_delay_ms && !j->due)
			return mock_stream_wait(c, j->p.frame_delay_ms);
		j->due = 0;
	}
	data = j->api->event(j, j->part, j->idx, &name);
	if (data) {
		const char *next_name;
		char *next = j->part == PART_TAIL ? j->api->event(j, j->part, j->idx + 1, &next_name)
		                                  : NULL;

		mock_stream_write(c, name, data, j->part == PART_TAIL && !next);
		free(next);
		free(data);
		j->idx++;
	} else if (j->part == PART_HEAD) {
		j->part = PART_FRAME;
		j->idx = 0;
	} else if (j->p.end_delay_ms && !j->due) {
		return mock_stream_wait(c, j->p.end_delay_ms);
	} else {
		if (j->chunked)
			mock_buf_append(&c->out, "0\r\n\r\n", 5);
		mock_resp_done(c);
	}
	return 1;
}

/* After x-mock-ttfb-ms: write the answer, or the head of the stream. */
static void mock_resp_start(struct mock_conn *c)
{
	char msg[64];

	c->phase = PHASE_IDLE;
	if (c->job.p.status) {
		snprintf(msg, sizeof msg, "mock error (x-mock-status: %u)", (unsigned)c->job.p.status);
		mock_resp_error(c, (unsigned)c->job.p.status, msg);
	} else if (c->job.route == ROUTE_MODELS) {
		mock_resp_json(c, 200, mock_models_render());
	} else if (c->job.route == ROUTE_STORED) {
		mock_resp_json(c, 200, stored_render(&c->job));
	} else if (c->job.route != ROUTE_OPENAI && c->job.route != ROUTE_ANTHROPIC) {
		snprintf(msg, sizeof msg, "no route for %s %.32s",
		         http_method_str((enum http_method)c->req.method),
		         mock_buf_str(&c->req.url));
		mock_resp_error(c, 404, msg);
	} else if (c->job.stream) {
		mock_stream_start(c);
	} else {
		mock_resp_completion(c);
	}
}

/* Header overrides and the request body's model/stream flags into the job. */
static int mock_job_load(struct mock_conn *c, char *err, size_t errlen)
{
	struct mock_job *j = &c->job;
	const struct mock_req *r = &c->req;
	const struct mock_hdr *h;
	static const struct mock_classes no_classes;
	const cJSON *model;
	cJSON *body = NULL;
	const char *why;
	char name[48];
	uint64_t v, h64 = HASH_FNV64_BASIS;
	size_t i;
	int rc = -1;

	j->p = mock.defaults;
	for (i = 0; i < MOCK_NKNOBS; i++) {
		snprintf(name, sizeof name, "x-mock-%s", mock_knobs[i].name);
		h = mock_req_header_find(r, name);
		if (!h)
			continue;
		if (mock_parse_u64(r->hbuf.p + h->value_off, h->value_len, &v) < 0 ||
		    v < mock_knobs[i].min || v > mock_knobs[i].max) {
			snprintf(err, errlen, "invalid %s: expected an integer in [%llu, %llu]", name,
			         (unsigned long long)mock_knobs[i].min, (unsigned long long)mock_knobs[i].max);
			goto out;
		}
		memcpy((char *)&j->p + mock_knobs[i].off, &v, sizeof v);
	}
	h = mock_req_header_find(r, "x-mock-service-tier");
	if (h && mock_parse_tier(r->hbuf.p + h->value_off, h->value_len, j->p.service_tier) < 0) {
		snprintf(err, errlen, "invalid x-mock-service-tier: expected 1 to %d of [a-z_]",
		         MOCK_TIER_MAX);
		goto out;
	}
	why = mock_params_check(&j->p);
	if (why) {
		snprintf(err, errlen, "invalid x-mock-* knobs: %s", why);
		goto out;
	}
	h = mock_req_header_find(r, "x-mock-model");
	if (j->route == ROUTE_OPENAI || j->route == ROUTE_ANTHROPIC) {
		body = cJSON_ParseWithLength(mock_buf_str(&r->body), r->body.len);
		if (!cJSON_IsObject(body) && !j->p.status) {
			snprintf(err, errlen, "request body is not a JSON object");
			goto out;
		}
		model = mock_json_last(body, "model");
		if (!h && cJSON_IsString(model))
			j->model = mock_strndup(model->valuestring, strlen(model->valuestring));
		j->stream = j->api->event && cJSON_IsTrue(mock_json_last(body, "stream"));
		j->include_usage = cJSON_IsTrue(mock_json_last(
			mock_json_last(body, "stream_options"), "include_usage"));
	}
	if (h)
		j->model = mock_text_dup(r->hbuf.p + h->value_off, h->value_len);
	if (!j->model)
		j->model = mock_strndup("mock-model", 10);
	/* The id depends on what shapes the content, so equal requests get equal bytes. */
	h64 = hash_fnv1a64(h64, j->api->id_prefix, strlen(j->api->id_prefix));
	h64 = hash_fnv1a64(h64, j->model, strlen(j->model) + 1);
	h64 = hash_fnv1a64(h64, &j->stream, sizeof j->stream);
	h64 = hash_fnv1a64(h64, &j->include_usage, sizeof j->include_usage);
	h64 = hash_fnv1a64(h64, &j->p.frames, sizeof j->p.frames);
	h64 = hash_fnv1a64(h64, &j->p.body_bytes, sizeof j->p.body_bytes);
	h64 = hash_fnv1a64(h64, &j->p.tok, sizeof j->p.tok);
	if (memcmp(&j->p.cls, &no_classes, sizeof no_classes))
		h64 = hash_fnv1a64(h64, &j->p.cls, sizeof j->p.cls);
	if (j->p.service_tier[0])
		h64 = hash_fnv1a64(h64, j->p.service_tier, strlen(j->p.service_tier));
	/* A Responses create's id names what it stores: two inputs never share one, nor two
	 * requests a gateway told apart by X-Request-Id (two keys' equal creates: OpenAI
	 * never gives two creates one id). */
	if (j->api == &mock_responses) {
		const struct mock_hdr *rid = mock_req_header_find(r, "x-request-id");

		h64 = hash_fnv1a64(h64, mock_buf_str(&r->body), r->body.len);
		if (rid)
			h64 = hash_fnv1a64(h64, r->hbuf.p + rid->value_off, rid->value_len);
	}
	if (j->route != ROUTE_STORED)
		snprintf(j->id, sizeof j->id, "%s%016llx", j->api->id_prefix, (unsigned long long)h64);
	rc = 0;
out:
	cJSON_Delete(body);
	return rc;
}

/* Every path the mock serves: its route, and the API that answers it (the shape of its
 * errors too). */
static const struct mock_endpoint {
	unsigned method;
	const char *path;
	enum mock_route route;
	const struct mock_api *api;
} mock_endpoints[] = {
	{HTTP_POST, "/v1/chat/completions", ROUTE_OPENAI, &mock_openai},
	{HTTP_POST, "/v1/completions", ROUTE_OPENAI, &mock_completions},
	{HTTP_POST, "/v1/embeddings", ROUTE_OPENAI, &mock_embeddings},
	{HTTP_POST, "/v1/responses", ROUTE_OPENAI, &mock_responses},
	{HTTP_POST, "/v1/responses/compact", ROUTE_OPENAI, &mock_compact},
	{HTTP_POST, "/v1/responses/input_tokens", ROUTE_OPENAI, &mock_input_tokens},
	{HTTP_POST, "/v1/messages", ROUTE_ANTHROPIC, &mock_anthropic},
	{HTTP_POST, "/v1/messages/count_tokens", ROUTE_ANTHROPIC, &mock_count_tokens},
	{HTTP_GET, "/v1/models", ROUTE_MODELS, &mock_openai},
	{HTTP_HEAD, "/v1/models", ROUTE_MODELS, &mock_openai},
	{HTTP_GET, "/_mock/requests", ROUTE_LOG, &mock_openai},
	{HTTP_DELETE, "/_mock/requests", ROUTE_LOG_CLEAR, &mock_openai},
	{HTTP_GET, "/_mock/stats", ROUTE_STATS, &mock_openai},
};

/* The endpoint of path, for method (any method when method_any); NULL if none. */
static const struct mock_endpoint *mock_endpoint_find(unsigned method, int method_any,
                                                      const char *path, size_t n)
{
	size_t i;

	for (i = 0; i < sizeof mock_endpoints / sizeof mock_endpoints[0]; i++)
		if ((method_any || mock_endpoints[i].method == method) &&
		    strlen(mock_endpoints[i].path) == n && !memcmp(mock_endpoints[i].path, path, n))
			return &mock_endpoints[i];
	return NULL;
}

/* GET and DELETE /v1/responses/ID, POST .../ID/cancel, GET .../ID/input_items: the
 * route, with what is asked and the id into j; ROUTE_NONE for any other path. */
static enum mock_route mock_stored_find(unsigned method, const char *path, size_t n,
                                        struct mock_job *j)
{
	static const char base[] = "/v1/responses/";
	const size_t b = sizeof base - 1;
	const char *id = path + b, *slash;
	size_t idlen, tail;

	if (n <= b || memcmp(path, base, b) != 0)
		return ROUTE_NONE;
	slash = memchr(id, '/', n - b);
	idlen = slash ? (size_t)(slash - id) : n - b;
	tail = n - b - idlen;
	if (!idlen || idlen >= sizeof j->id)
		return ROUTE_NONE;
	if (!slash && (method == HTTP_GET || method == HTTP_DELETE))
		j->stored = method == HTTP_GET ? STORED_GET : STORED_DELETE;
	else if (method == HTTP_POST && tail == 7 && !memcmp(slash, "/cancel", 7))
		j->stored = STORED_CANCEL;
	else if (method == HTTP_GET && tail == 12 && !memcmp(slash, "/input_items", 12))
		j->stored = STORED_INPUT_ITEMS;
	else
		return ROUTE_NONE;
	memcpy(j->id, id, idlen);
	j->id[idlen] = '\0';
	return ROUTE_STORED;
}

static enum mock_route mock_route_find(unsigned method, const char *path, size_t n)
{
	const struct mock_endpoint *e = mock_endpoint_find(method, 0, path, n);

	return e ? e->route : ROUTE_NONE;
}

/* Errors take the shape of the API the path belongs to, whatever the method. */
static const struct mock_api *mock_api_pick(const char *path, size_t n)
{
	const struct mock_endpoint *e = mock_endpoint_find(0, 1, path, n);

	return e ? e->api : &mock_openai;
}

/* /_mock/ endpoints are neither logged nor counted nor subject to x-mock-* headers. */
static void mock_resp_internal(struct mock_conn *c)
{
	switch (c->job.route) {
	case ROUTE_LOG:
		mock_resp_json(c, 200, mock_log_render());
		break;
	case ROUTE_LOG_CLEAR:
		mock_resp_json(c, 200, mock_log_clear());
		break;
	case ROUTE_STATS:
		mock_resp_json(c, 200, mock_stats_render());
		break;
	default:
		mock_resp_error(c, 404, "no such mock endpoint");
	}
}

static void mock_conn_dispatch(struct mock_conn *c)
{
	struct mock_job *j = &c->job;
	const char *path;
	char err[128];
	size_t n;

	mock_req_path_get(&c->req, &path, &n);
	j->route = mock_route_find(c->req.method, path, n);
	j->api = mock_api_pick(path, n);
	if (j->route == ROUTE_NONE)
		j->route = mock_stored_find(c->req.method, path, n, j);
	if (n >= 7 && !memcmp(path, "/_mock/", 7)) {
		mock_resp_internal(c);
		return;
	}
	mock_log_add(&c->req);
	mock.stats.requests++;
	c->answering = 1;
	if (++mock.stats.answering > mock.stats.answering_max)
		mock.stats.answering_max = mock.stats.answering;
	if (mock_job_load(c, err, sizeof err) < 0) {
		mock_resp_error(c, 400, err);
		return;
	}
	/* A Responses create (or compact) echoes its request's settings in the answer. */
	if (j->route == ROUTE_OPENAI && (j->api == &mock_responses || j->api == &mock_compact))
		j->echo = cJSON_ParseWithLength(mock_buf_str(&c->req.body), c->req.body.len);
	if (j->p.ttfb_ms) {
		c->phase = PHASE_TTFB;
		ev_timer_set(&c->timer, (double)j->p.ttfb_ms / 1000.0, 0);
		ev_timer_start(mock.loop, &c->timer);
		return;
	}
	mock_resp_start(c);
}

/* ---- connections ---- */

static void mock_conn_free(struct mock_conn *c)
{
	if (!c->lingering && (c->phase != PHASE_IDLE || mock_buf_pending(&c->out)))
		mock.stats.aborts++;
	mock_answered(c);
	ev_io_stop(mock.loop, &c->rio);
	ev_io_stop(mock.loop, &c->wio);
	ev_timer_stop(mock.loop, &c->timer);
	ev_timer_stop(mock.loop, &c->stall);
	close(c->fd);
	if (c->prev)
		c->prev->next = c->next;
	else
		mock.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	mock_buf_free(&c->in);
	mock_buf_free(&c->out);
	mock_req_free(&c->req);
	mock_job_clear(&c->job);
	free(c);
	mock.stats.conns_open--;
}

/* Parses until one request is complete (and answers it) or the input runs out. */
static int mock_conn_parse(struct mock_conn *c)
{
	size_t n, pn, avail = mock_buf_pending(&c->in);
	enum http_errno err;
	const char *path;
	char msg[128];

	if (!avail || mock_buf_pending(&c->out) >= MOCK_OUT_HIGH)
		return 0;
	n = http_parser_execute(&c->parser, &mock_settings, c->in.p + c->in.off, avail);
	c->in.off += n;
	if (c->in.off == c->in.len)
		mock_buf_clear(&c->in);
	err = HTTP_PARSER_ERRNO(&c->parser);
	if (err == HPE_PAUSED) {
		http_parser_pause(&c->parser, 0);
		mock_conn_dispatch(c);
		return 1;
	}
	if (err == HPE_OK)
		return 0;
	if (c->abort_status == 413)
		snprintf(msg, sizeof msg, "request body larger than %u bytes", MOCK_BODY_MAX);
	else
		snprintf(msg, sizeof msg, "malformed request: %s", http_errno_description(err));
	c->req.keep_alive = 0;
	mock_req_path_get(&c->req, &path, &pn);
	c->job.api = mock_api_pick(path, pn);
	mock_resp_error(c, c->abort_status ? c->abort_status : 400, msg);
	return 1;
}

static int mock_conn_flush(struct mock_conn *c)
{
	int wrote = 0;
	ssize_t n;

	while (mock_buf_pending(&c->out)) {
		n = send(c->fd, c->out.p + c->out.off, mock_buf_pending(&c->out), MSG_NOSIGNAL);
		if (n > 0) {
			c->out.off += (size_t)n;
			mock.stats.bytes_out += (uint64_t)n;
			wrote = 1;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (wrote || !ev_is_active(&c->stall))
				ev_timer_again(mock.loop, &c->stall);
			return 0;
		} else {
			return -1;
		}
	}
	mock_buf_clear(&c->out);
	ev_timer_stop(mock.loop, &c->stall);
	return 0;
}

/* Runs at the end of every connection callback: advances the connection as far as it
 * can go now, then arms the watchers for what it waits for. While the loop runs, this
 * is the only place a connection is freed, so no callback outlives its connection. */
static void mock_conn_settle(struct mock_conn *c)
{
	int budget = MOCK_BUDGET, progress = 1;

	while (progress && budget-- > 0 && !c->dead) {
		progress = 0;
		if (c->phase == PHASE_STREAM)
			progress = mock_stream_pump(c);
		else if (c->phase == PHASE_IDLE && !c->closing && !c->drop)
			progress = mock_conn_parse(c);
		if (mock_conn_flush(c) < 0)
			c->dead = 1;
	}
	if (!c->dead && !mock_buf_pending(&c->out) && c->drop) {
		mock.stats.disconnects++;
		c->dead = 1;
	}
	if (c->dead) {
		mock_conn_free(c);
		return;
	}
	if (c->closing && !c->lingering && !mock_buf_pending(&c->out)) {
		shutdown(c->fd, SHUT_WR);
		c->lingering = 1;
		ev_timer_stop(mock.loop, &c->timer);
		ev_timer_set(&c->timer, MOCK_LINGER_S, 0);
		ev_timer_start(mock.loop, &c->timer);
	}
	c->yield = progress;
	if (c->lingering || mock_buf_pending(&c->in) < MOCK_IN_CAP)
		ev_io_start(mock.loop, &c->rio);
	else
		ev_io_stop(mock.loop, &c->rio);
	if (mock_buf_pending(&c->out) || c->yield)
		ev_io_start(mock.loop, &c->wio);
	else
		ev_io_stop(mock.loop, &c->wio);
}

/* EOF or an error from the client ends the connection at once: HTTP/1.1 clients do not
 * half-close, so a FIN means the client went away (possibly mid-stream). */
static void mock_conn_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct mock_conn *c = w->data;
	char discard[16384];
	ssize_t n;

	(void)loop;
	(void)revents;
	for (;;) {
		if (c->lingering) {
			n = recv(c->fd, discard, sizeof discard, 0);
		} else {
			if (mock_buf_pending(&c->in) >= MOCK_IN_CAP)
				break;
			mock_buf_reserve(&c->in, 16384);
			n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len - 1, 0);
			if (n > 0) {
				c->in.len += (size_t)n;
				c->in.p[c->in.len] = 0;
			}
		}
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		c->dead = 1;
		break;
	}
	mock_conn_settle(c);
}

static void mock_conn_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	mock_conn_settle(w->data);
}

static void mock_conn_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct mock_conn *c = w->data;

	(void)loop;
	(void)revents;
	if (c->lingering)
		c->dead = 1;
	else if (c->phase == PHASE_TTFB)
		mock_resp_start(c);
	else if (c->phase == PHASE_STREAM)
		c->job.due = 1;
	mock_conn_settle(c);
}

static void mock_conn_stall_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct mock_conn *c = w->data;

	(void)loop;
	(void)revents;
	c->dead = 1;
	mock_conn_settle(c);
}

static void mock_conn_open(int fd)
{
	struct mock_conn *c = mock_xmalloc(sizeof *c);
	int one = 1;

	memset(c, 0, sizeof *c);
	/* SSE events must leave one by one, not wait for Nagle. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd = fd;
	ev_io_init(&c->rio, mock_conn_read_cb, fd, EV_READ);
	ev_io_init(&c->wio, mock_conn_write_cb, fd, EV_WRITE);
	ev_timer_init(&c->timer, mock_conn_timer_cb, 0, 0);
	ev_init(&c->stall, mock_conn_stall_cb);
	c->stall.repeat = MOCK_STALL_S;
	c->rio.data = c->wio.data = c->timer.data = c->stall.data = c;
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	mock_job_clear(&c->job);
	c->next = mock.conns;
	if (c->next)
		c->next->prev = c;
	mock.conns = c;
	mock.stats.conns_total++;
	mock.stats.conns_open++;
	ev_io_start(mock.loop, &c->rio);
}

/* ---- listener, signals, main ---- */

static void mock_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	int fd, i;

	(void)w;
	(void)revents;
	for (i = 0; i < 256; i++) {
		fd = accept4(mock.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			mock_conn_open(fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			/* Out of descriptors: a level-triggered retry would spin, so back off. */
			fprintf(stderr, "mock: accept: %s\n", strerror(errno));
			ev_io_stop(loop, &mock.lio);
			ev_timer_start(loop, &mock.accept_retry);
		}
		break;
	}
}

static void mock_accept_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_io_start(loop, &mock.lio);
}

static void mock_signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static int mock_listen(const char *spec)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	char *host = NULL, *port, host_out[NI_MAXHOST], port_out[NI_MAXSERV];
	int one = 1, rc = -1, e;

	host = mock_strndup(spec, strlen(spec));
	port = strrchr(host, ':');
	if (!port) {
		fprintf(stderr, "mock-upstream: --listen wants HOST:PORT, got '%s'\n", spec);
		goto out;
	}
	*port++ = 0;
	if (host[0] == '[' && port - host >= 3 && port[-2] == ']') {
		port[-2] = 0;
		memmove(host, host + 1, strlen(host));
	}
	e = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (e) {
		fprintf(stderr, "mock-upstream: %s: %s\n", spec, gai_strerror(e));
		goto out;
	}
	mock.lfd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (mock.lfd < 0 || setsockopt(mock.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(mock.lfd, res->ai_addr, res->ai_addrlen) < 0 || listen(mock.lfd, 4096) < 0 ||
	    getsockname(mock.lfd, (struct sockaddr *)&ss, &sl) < 0) {
		fprintf(stderr, "mock-upstream: %s: %s\n", spec, strerror(errno));
		goto out;
	}
	e = getnameinfo((struct sockaddr *)&ss, sl, host_out, sizeof host_out, port_out, sizeof port_out,
	                NI_NUMERICHOST | NI_NUMERICSERV);
	if (e) {
		fprintf(stderr, "mock-upstream: %s: %s\n", spec, gai_strerror(e));
		goto out;
	}
	fprintf(stderr, ss.ss_family == AF_INET6 ? "listening on [%s]:%s\n" : "listening on %s:%s\n",
	        host_out, port_out);
	rc = 0;
out:
	if (res)
		freeaddrinfo(res);
	free(host);
	return rc;
}

static void mock_usage_print(FILE *f)
{
	char opt[48];
	size_t i;

	fprintf(f, "usage: mock-upstream --listen HOST:PORT [options]\n"
	           "Deterministic OpenAI/Anthropic upstream for tests and benchmarks.\n"
	           "  --listen HOST:PORT             address to serve (port 0: any free port)\n"
	           "  --quiet                        no per-request log on stderr\n"
	           "  --help                         this text\n"
	           "Response knobs: --NAME N sets the default, request header x-mock-NAME: N\n"
	           "overrides it per request (also x-mock-model: NAME):\n"
	           "  --service-tier NAME            service_tier reported, [a-z_]{1,16} (none)\n");
	for (i = 0; i < MOCK_NKNOBS; i++) {
		snprintf(opt, sizeof opt, "--%s N", mock_knobs[i].name);
		fprintf(f, "  %-30s %s\n", opt, mock_knobs[i].help);
	}
}

/* Holding 1000+ streams needs more than the usual 1024 descriptors. */
static void mock_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int mock_parse_args(int argc, char **argv, const char **listen_addr)
{
	enum { OPT_LISTEN = 256, OPT_QUIET, OPT_HELP, OPT_TIER, OPT_KNOB };
	struct option opts[MOCK_NKNOBS + 5] = {
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"quiet", no_argument, NULL, OPT_QUIET},
		{"help", no_argument, NULL, OPT_HELP},
		{"service-tier", required_argument, NULL, OPT_TIER},
	};
	const struct mock_knob *k;
	const char *why;
	uint64_t v;
	size_t i;
	int o;

	for (i = 0; i < MOCK_NKNOBS; i++)
		opts[4 + i] = (struct option){mock_knobs[i].name, required_argument, NULL, OPT_KNOB + (int)i};
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == OPT_LISTEN) {
			*listen_addr = optarg;
		} else if (o == OPT_QUIET) {
			mock.quiet = 1;
		} else if (o == OPT_HELP) {
			mock_usage_print(stdout);
			exit(0);
		} else if (o == OPT_TIER) {
			if (mock_parse_tier(optarg, strlen(optarg), mock.defaults.service_tier) < 0) {
				fprintf(stderr, "mock-upstream: --service-tier wants 1 to %d of [a-z_]\n",
				        MOCK_TIER_MAX);
				return -1;
			}
		} else if (o >= OPT_KNOB) {
			k = &mock_knobs[o - OPT_KNOB];
			if (mock_parse_u64(optarg, strlen(optarg), &v) < 0 || v < k->min || v > k->max) {
				fprintf(stderr, "mock-upstream: --%s wants an integer in [%llu, %llu]\n", k->name,
				        (unsigned long long)k->min, (unsigned long long)k->max);
				return -1;
			}
			memcpy((char *)&mock.defaults + k->off, &v, sizeof v);
		} else {
			return -1;
		}
	}
	if (optind != argc || !*listen_addr)
		return -1;
	why = mock_params_check(&mock.defaults);
	if (why) {
		fprintf(stderr, "mock-upstream: %s\n", why);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	cJSON_Hooks hooks = {mock_xmalloc, free};
	const char *listen_addr = NULL;
	size_t i;
	int rc = 1;

	if (mock_parse_args(argc, argv, &listen_addr) < 0) {
		mock_usage_print(stderr);
		return 2;
	}
	cJSON_InitHooks(&hooks);
	signal(SIGPIPE, SIG_IGN);
	mock_raise_nofile();
	mock.loop = EV_DEFAULT;
	if (mock_listen(listen_addr) < 0)
		goto out;
	ev_io_init(&mock.lio, mock_accept_cb, mock.lfd, EV_READ);
	ev_io_start(mock.loop, &mock.lio);
	ev_timer_init(&mock.accept_retry, mock_accept_retry_cb, 0.1, 0);
	ev_signal_init(&mock.sigterm, mock_signal_cb, SIGTERM);
	ev_signal_init(&mock.sigint, mock_signal_cb, SIGINT);
	ev_signal_start(mock.loop, &mock.sigterm);
	ev_signal_start(mock.loop, &mock.sigint);
	ev_run(mock.loop, 0);
	rc = 0;
out:
	while (mock.conns)
		mock_conn_free(mock.conns);
	for (i = 0; i < MOCK_LOG_SIZE; i++)
		cJSON_Delete(mock.log[i]);
	ev_io_stop(mock.loop, &mock.lio);
	ev_timer_stop(mock.loop, &mock.accept_retry);
	ev_signal_stop(mock.loop, &mock.sigterm);
	ev_signal_stop(mock.loop, &mock.sigint);
	if (mock.lfd >= 0)
		close(mock.lfd);
	ev_loop_destroy(mock.loop);
	return rc;
}
