/* server: the HTTP side of tally-queryd on libmicrohttpd: a thread pool, one
 * read-only database connection per pool thread, routing, the operator token check,
 * and turning api/export/assets results into responses. server_start/stop run on the
 * main thread; requests on MHD's pool threads. */
#ifndef QUERYD_SERVER_H
#define QUERYD_SERVER_H

#define SERVER_TOKEN_MAX 4096   /* operator token bytes at most */

#include <stddef.h>
#include <sys/socket.h>

struct server_config {
	const char *listen;        /* HOST:PORT */
	const char *db_path;       /* the store: a SQLite path or a postgresql:// URL */
	const char *control_path;  /* NULL: no agent to ask for /api/live */
	const char *static_dir;    /* NULL: the embedded dashboard */
	const char *token;         /* NULL or "": serve no data; copied (SERVER_TOKEN_MAX at most) */
	int threads;
};

struct server;

/* Opens one connection per thread (so a missing or old database fails here), then
 * listens. NULL with a message in err. The config's strings must outlive the server. */
struct server *server_start(const struct server_config *cfg, char *err, size_t errlen);

/* Requests handled since start (any thread; read from the main thread). */
unsigned long server_served(struct server *s);

/* Stops accepting, finishes with MHD's threads, closes the connections, frees s. */
void server_stop(struct server *s);

/* The address server_start listens on for HOST:PORT ([v6]:PORT too). 0, or -1 with err
 * (also for --self-check, which binds it to see). */
int server_address(const char *listen, struct sockaddr_storage *sa, char *err, size_t errlen);

/* 0 if a token (not "") is one server_start accepts: at most SERVER_TOKEN_MAX bytes,
 * no whitespace at either end (HTTP would trim it). Else -1 with err. */
int server_token_check(const char *token, char *err, size_t errlen);

#endif
