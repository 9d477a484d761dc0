/* server: libmicrohttpd glue (see server.h). server_start/stop on the main thread;
 * server_handle on MHD's pool threads, each of which takes one of the connections
 * opened at start the first time it serves a request and keeps it. */
#include "server.h"

#include <ctype.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "api.h"
#include "assets.h"
#include "conn.h"
#include "export.h"
#include "json.h"
#include "log.h"
#include "params.h"

#define SERVER_MAX_PARAMS 32
#define SERVER_TIMEOUT_S 60
#define SERVER_MAX_CONNECTIONS 256
#define SERVER_JSON "application/json; charset=utf-8"
#define SERVER_NO_TOKEN "TALLY_OPERATOR_TOKEN is not set: queryd serves no data"

struct server {
	struct MHD_Daemon *daemon;
	struct server_config cfg;
	struct conn *conns;        /* one per pool thread */
	int nconns;
	atomic_int next_conn;
	atomic_ulong served;
	int has_token;
	size_t token_len;
	char token[SERVER_TOKEN_MAX];  /* zero-padded: compared whole, whatever its length */
};

/* The connection of the pool thread running this code (taken on first use). */
static _Thread_local struct conn *server_thread_conn;

static struct conn *server_conn(struct server *s)
{
	int i;

	if (!server_thread_conn) {
		i = atomic_fetch_add(&s->next_conn, 1);
		if (i >= s->nconns)
			return NULL;   /* more threads than MHD was asked for: never expected */
		server_thread_conn = &s->conns[i];
	}
	return server_thread_conn;
}

/* 1 if given is the operator token. Every one of the SERVER_TOKEN_MAX bytes is compared
 * whatever the lengths, so the timing shows neither the token's bytes nor its length
 * (only the caller's own length, through strnlen). No libcrypto for this: it alone was
 * a third of queryd's resident memory. */
static int server_token_equal(const struct server *s, const char *given)
{
	size_t glen = strnlen(given, SERVER_TOKEN_MAX + 1), i;
	unsigned diff = glen != s->token_len;

	for (i = 0; i < SERVER_TOKEN_MAX; i++)
		diff |= (unsigned char)(i < glen ? given[i] : 0) ^ (unsigned char)s->token[i];
	return diff == 0;
}

/* 1 if the request carries "Authorization: Bearer <the operator token>". */
static int server_authorized(struct server *s, struct MHD_Connection *mc)
{
	const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
	                                            MHD_HTTP_HEADER_AUTHORIZATION);
	const char *given = "";
	int shaped = 0;

	if (h && strncasecmp(h, "Bearer ", 7) == 0) {
		given = h + 7;
		while (*given == ' ')
			given++;
		shaped = *given != '\0';
	}
	return server_token_equal(s, given) & shaped;
}

static enum MHD_Result server_queue(struct MHD_Connection *mc, unsigned status,
                                    struct MHD_Response *resp)
{
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;   /* out of memory: MHD closes the connection */
	ret = MHD_queue_response(mc, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Sends r (and frees its body) as a JSON answer. */
static enum MHD_Result server_send(struct MHD_Connection *mc, struct api_reply *r)
{
	char *text = r->body ? json_print(r->body) : NULL;
	struct MHD_Response *resp;

	cJSON_Delete(r->body);
	r->body = NULL;
	if (!text)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, SERVER_JSON);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (r->status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (r->status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	return server_queue(mc, r->status, resp);
}

static enum MHD_Result server_error(struct MHD_Connection *mc, unsigned status, const char *msg,
                                    const char *param)
{
	struct api_reply r = { 0, NULL };

	api_error(&r, status, msg, param);
	return server_send(mc, &r);
}

struct server_args {
	struct params_pair pairs[SERVER_MAX_PARAMS];
	size_t n;
	int overflow;
};

static enum MHD_Result server_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
	struct server_args *a = cls;

	(void)kind;
	if (a->n == SERVER_MAX_PARAMS) {
		a->overflow = 1;
		return MHD_NO;
	}
	a->pairs[a->n].name = key;
	a->pairs[a->n].value = value;
	a->n++;
	return MHD_YES;
}

enum server_route {
	ROUTE_SUMMARY, ROUTE_REQUESTS, ROUTE_REQUEST_ONE, ROUTE_KEYS, ROUTE_TEAMS, ROUTE_MODELS,
	ROUTE_LIVE, ROUTE_EXPORT, ROUTE_NONE
};

static const struct {
	const char *path;
	enum params_endpoint params;
} server_routes[] = {
	[ROUTE_SUMMARY] = { "summary", PARAMS_SUMMARY },
	[ROUTE_REQUESTS] = { "requests", PARAMS_REQUESTS },
	[ROUTE_REQUEST_ONE] = { NULL, PARAMS_NONE },   /* requests/{request_id} */
	[ROUTE_KEYS] = { "keys", PARAMS_NONE },
	[ROUTE_TEAMS] = { "teams", PARAMS_NONE },
	[ROUTE_MODELS] = { "models", PARAMS_NONE },
	[ROUTE_LIVE] = { "live", PARAMS_NONE },
	[ROUTE_EXPORT] = { "export", PARAMS_EXPORT },
};

static enum server_route server_route(const char *path, const char **request_id)
{
	int i;

	if (strncmp(path, "requests/", 9) == 0 && path[9]) {
		*request_id = path + 9;
		return ROUTE_REQUEST_ONE;
	}
	for (i = 0; i < ROUTE_NONE; i++)
		if (server_routes[i].path && strcmp(path, server_routes[i].path) == 0)
			return (enum server_route)i;
	return ROUTE_NONE;
}

/* A data endpoint, once routed and authorized. */
static enum MHD_Result server_data(struct server *s, struct MHD_Connection *mc, struct conn *c,
                                   enum server_route route, const char *request_id)
{
	struct api_reply r = { 0, NULL };
	struct server_args args = { .n = 0 };
	struct params_error perr;
	struct MHD_Response *resp;
	struct params p;
	char err[256];

	MHD_get_connection_values(mc, MHD_GET_ARGUMENT_KIND, server_arg, &args);
	if (args.overflow)
		return server_error(mc, 400, "too many parameters", NULL);
	if (params_parse(&p, server_routes[route].params, args.pairs, args.n, time(NULL), &perr) < 0)
		return server_error(mc, 400, perr.msg, perr.param);
	if (api_resolve_names(c, &p, &r) < 0)
		return server_send(mc, &r);
	switch (route) {
	case ROUTE_SUMMARY:
		api_summary(c, &p, time(NULL), &r);
		break;
	case ROUTE_REQUESTS:
		api_requests(c, &p, &r);
		break;
	case ROUTE_REQUEST_ONE:
		api_request_one(c, request_id, &r);
		break;
	case ROUTE_KEYS:
		api_keys(c, time(NULL), &r);
		break;
	case ROUTE_TEAMS:
		api_teams(c, time(NULL), &r);
		break;
	case ROUTE_MODELS:
		api_models(c, time(NULL), &r);
		break;
	case ROUTE_LIVE:
		api_live(c, s->cfg.control_path, &r);
		break;
	case ROUTE_EXPORT:
		resp = export_response(s->cfg.db_path, &p, err, sizeof(err));
		if (!resp) {
			log_warn("export: %s", err);
			return server_error(mc, 503, "the database cannot be read", NULL);
		}
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
		return server_queue(mc, MHD_HTTP_OK, resp);
	case ROUTE_NONE:
		return server_error(mc, 404, "not found", NULL);
	}
	return server_send(mc, &r);
}

/* A request with a body (Content-Length above 0, or chunked). */
static int server_has_body(struct MHD_Connection *mc, size_t upload_size)
{
	const char *len = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
	                                              MHD_HTTP_HEADER_CONTENT_LENGTH);

	return upload_size > 0 || (len && strcmp(len, "0") != 0) ||
	       MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
	                                   MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

static enum MHD_Result server_handle(void *cls, struct MHD_Connection *mc, const char *url,
                                     const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **req_cls)
{
	struct server *s = cls;
	struct api_reply r = { 0, NULL };
	const char *request_id = NULL;
	enum server_route route;
	struct MHD_Response *resp;
	struct conn *c;
	unsigned status;

	(void)version;
	(void)upload_data;
	(void)req_cls;
	log_debug("%s %s", method, url);
	atomic_fetch_add_explicit(&s->served, 1, memory_order_relaxed);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return server_error(mc, 405, "method not allowed", NULL);
	if (server_has_body(mc, *upload_data_size))
		return server_error(mc, 400, "a request body is not allowed", NULL);
	if (strncmp(url, "/api/", 5) != 0) {
		resp = assets_response(s->cfg.static_dir, url,
		                       MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
		                                                   MHD_HTTP_HEADER_IF_NONE_MATCH),
		                       &status);
		return resp ? server_queue(mc, status, resp) : server_error(mc, 404, "not found", NULL);
	}
	c = server_conn(s);
	if (!c)
		return server_error(mc, 503, "no database connection for this thread", NULL);
	if (strcmp(url + 5, "health") == 0) {
		api_health(c, s->has_token, &r);
		return server_send(mc, &r);
	}
	route = server_route(url + 5, &request_id);
	if (route == ROUTE_NONE)
		return server_error(mc, 404, "not found", NULL);
	if (!s->has_token)
		return server_error(mc, 503, SERVER_NO_TOKEN, NULL);
	if (!server_authorized(s, mc))
		return server_error(mc, 401, "missing or invalid operator token", NULL);
	return server_data(s, mc, c, route, request_id);
}

static void server_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_warn("libmicrohttpd: %s", line);
}

int server_address(const char *listen, struct sockaddr_storage *sa, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
	const char *colon = strrchr(listen, ':');
	struct addrinfo *res = NULL;
	char host[256];
	size_t n;
	int rc;

	if (!colon || !colon[1] || (n = (size_t)(colon - listen)) >= sizeof(host)) {
		snprintf(err, errlen, "--listen %s: want HOST:PORT", listen);
		return -1;
	}
	memcpy(host, listen, n);
	host[n] = '\0';
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = '\0';
	}
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "--listen %s: %s", listen, gai_strerror(rc));
		return -1;
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

int server_token_check(const char *token, char *err, size_t errlen)
{
	size_t len = strlen(token);

	if (len > SERVER_TOKEN_MAX) {
		snprintf(err, errlen, "the operator token is longer than %d bytes", SERVER_TOKEN_MAX);
		return -1;
	}
	/* HTTP trims a header's surrounding spaces: such a token could never match. */
	if (len && (isspace((unsigned char)token[0]) || isspace((unsigned char)token[len - 1]))) {
		snprintf(err, errlen, "the operator token starts or ends with whitespace");
		return -1;
	}
	return 0;
}

struct server *server_start(const struct server_config *cfg, char *err, size_t errlen)
{
	struct server *s = calloc(1, sizeof(*s));
	struct sockaddr_storage sa;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
	int i;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->cfg = *cfg;
	if (server_address(cfg->listen, &sa, err, errlen) < 0)
		goto fail;
	/* "" is no token, as main.c has it for an empty $TALLY_OPERATOR_TOKEN. */
	if (cfg->token && cfg->token[0]) {
		if (server_token_check(cfg->token, err, errlen) < 0)
			goto fail;
		s->token_len = strlen(cfg->token);
		memcpy(s->token, cfg->token, s->token_len);
		s->has_token = 1;
	}
	s->conns = calloc((size_t)cfg->threads, sizeof(*s->conns));
	if (!s->conns) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (i = 0; i < cfg->threads; i++) {
		if (conn_open(&s->conns[i], cfg->db_path, err, errlen) < 0)
			goto fail;
		s->nconns++;
	}
	/* Connections prepare their queries on first use; this checks them all at start. */
	if (conn_check(&s->conns[0], err, errlen) < 0)
		goto fail;
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* the logger first, so that MHD reports nothing about the other options on its own */
	s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, server_handle, s,
	                             MHD_OPTION_EXTERNAL_LOGGER, server_mhd_log, NULL,
	                             MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
	                             MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
	                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVER_TIMEOUT_S,
	                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)SERVER_MAX_CONNECTIONS,
	                             MHD_OPTION_END);
	if (!s->daemon) {
		snprintf(err, errlen, "cannot listen on %s (in use, or not an address of this host?)",
		         cfg->listen);
		goto fail;
	}
	return s;
fail:
	server_stop(s);
	return NULL;
}

unsigned long server_served(struct server *s)
{
	return atomic_load_explicit(&s->served, memory_order_relaxed);
}

void server_stop(struct server *s)
{
	int i;

	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	for (i = 0; i < s->nconns; i++)
		conn_close(&s->conns[i]);
	free(s->conns);
	explicit_bzero(s->token, sizeof(s->token));
	free(s);
}
