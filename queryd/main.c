/* tally-queryd: the dashboard's and the JSON API's server over the tally database,
 * read only (docs/api.md). The main thread parses the flags, reads the operator
 * token, starts the server (server.c: MHD's thread pool does the rest) and waits for
 * SIGINT or SIGTERM to stop it. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

#define QUERYD_PATH_MAX 4096
#define QUERYD_TOKEN_MAX (SERVER_TOKEN_MAX + 3)   /* a token, CRLF, NUL */
#define QUERYD_THREADS_MAX 64

struct queryd_config {
	char db[QUERYD_PATH_MAX];
	char listen[256];
	char control[QUERYD_PATH_MAX];
	char static_dir[QUERYD_PATH_MAX];
	char token_file[QUERYD_PATH_MAX];
	int threads;
	enum log_level log_level;
};

struct queryd_flag {
	const char *name;
	const char *arg;
	const char *help;
	int (*apply)(struct queryd_config *cfg, const char *value);
};

static int queryd_copy(char *dst, size_t cap, const char *value)
{
	size_t len = strlen(value);

	if (len == 0 || len >= cap)
		return -1;
	memcpy(dst, value, len + 1);
	return 0;
}

static int queryd_set_db(struct queryd_config *cfg, const char *v)
{
	return queryd_copy(cfg->db, sizeof(cfg->db), v);
}

static int queryd_set_listen(struct queryd_config *cfg, const char *v)
{
	return queryd_copy(cfg->listen, sizeof(cfg->listen), v);
}

static int queryd_set_control(struct queryd_config *cfg, const char *v)
{
	return queryd_copy(cfg->control, sizeof(cfg->control), v);
}

static int queryd_set_static(struct queryd_config *cfg, const char *v)
{
	return queryd_copy(cfg->static_dir, sizeof(cfg->static_dir), v);
}

static int queryd_set_token_file(struct queryd_config *cfg, const char *v)
{
	return queryd_copy(cfg->token_file, sizeof(cfg->token_file), v);
}

static int queryd_set_threads(struct queryd_config *cfg, const char *v)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 1 || n > QUERYD_THREADS_MAX)
		return -1;
	cfg->threads = (int)n;
	return 0;
}

static int queryd_set_log_level(struct queryd_config *cfg, const char *v)
{
	return log_level_parse(v, &cfg->log_level);
}

static const struct queryd_flag queryd_flags[] = {
	{ "db", "PATH", "tally database, opened read only; must exist at the current schema (default ./data/tally.db)", queryd_set_db },
	{ "listen", "HOST:PORT", "HTTP listen address (default 127.0.0.1:8081)", queryd_set_listen },
	{ "control", "PATH", "the agent's control socket, for /api/live (default: the database path + .ctl)", queryd_set_control },
	{ "threads", "N", "HTTP worker threads, each with its own database connection (default 4, at most 64)", queryd_set_threads },
	{ "static", "DIR", "serve the dashboard's files from DIR instead of the built-in copy", queryd_set_static },
	{ "token-file", "PATH", "read the operator token from PATH (default: $TALLY_OPERATOR_TOKEN)", queryd_set_token_file },
	{ "log-level", "LEVEL", "error, warn, info or debug (default info)", queryd_set_log_level },
};

#define QUERYD_NFLAGS (sizeof(queryd_flags) / sizeof(queryd_flags[0]))

static void queryd_usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: tally-queryd [OPTIONS]\n\nServes the tally dashboard and its JSON API "
	        "(docs/api.md) from the database, read only.\nThe operator token comes from "
	        "--token-file or $TALLY_OPERATOR_TOKEN; without one only\n/api/health and the "
	        "dashboard's files are served.\n\n");
	for (i = 0; i < QUERYD_NFLAGS; i++)
		fprintf(out, "  --%s %s\n      %s\n", queryd_flags[i].name, queryd_flags[i].arg,
		        queryd_flags[i].help);
	fprintf(out, "  --help\n      this text\n");
}

/* 0, 1 for --help (printed), -1 on a usage error (reported). */
static int queryd_parse(struct queryd_config *cfg, int argc, char **argv)
{
	struct option opts[QUERYD_NFLAGS + 2];
	size_t i;
	int c, idx;

	for (i = 0; i < QUERYD_NFLAGS; i++)
		opts[i] = (struct option){ queryd_flags[i].name, required_argument, NULL, (int)i };
	opts[QUERYD_NFLAGS] = (struct option){ "help", no_argument, NULL, 'h' + 256 };
	opts[QUERYD_NFLAGS + 1] = (struct option){ NULL, 0, NULL, 0 };
	while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		if (c == 'h' + 256) {
			queryd_usage(stdout);
			return 1;
		}
		if (c < 0 || (size_t)c >= QUERYD_NFLAGS) {
			queryd_usage(stderr);
			return -1;
		}
		if (queryd_flags[c].apply(cfg, optarg) < 0) {
			fprintf(stderr, "tally-queryd: bad value for --%s: %s\n", queryd_flags[c].name,
			        optarg);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tally-queryd: unexpected argument %s\n", argv[optind]);
		return -1;
	}
	return 0;
}

/* Reads the token file into buf (one trailing newline, CRLF too, removed). An empty
 * token is an error: the operator meant to set one. 0 or -1 (logged). */
static int queryd_read_token(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f) {
		log_error("--token-file %s: %s", path, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, cap - 1, f);
	/* A file that fills buf exactly is too long only if a byte follows. */
	if (ferror(f) || (n == cap - 1 && fgetc(f) != EOF)) {
		log_error("--token-file %s: %s", path, ferror(f) ? "read error" : "longer than 4 KB");
		fclose(f);
		return -1;
	}
	fclose(f);
	buf[n] = '\0';
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (n && buf[n - 1] == '\r')
		buf[--n] = '\0';
	if (n == 0 || strlen(buf) != n) {
		log_error("--token-file %s: empty, or holds a NUL byte", path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct queryd_config cfg = { .db = "./data/tally.db", .listen = "127.0.0.1:8081",
	                             .threads = 4, .log_level = LOG_INFO };
	struct server_config scfg;
	static char token[QUERYD_TOKEN_MAX];
	const char *env = getenv("TALLY_OPERATOR_TOKEN");
	struct server *srv;
	sigset_t stop;
	char err[512];
	int rc, sig;

	/* Idle memory after busy hours: glibc's adaptive thresholds keep a large answer's
	 * blocks (a 30-day hourly summary is ~250 KB of JSON) after it is freed, and each
	 * pool thread gets an arena of its own that is never trimmed. One arena, fixed
	 * thresholds: after the dashboard's calls on 10M rows idle RSS went from 11.5 to
	 * 9.0 MiB (7.4 at start); the requests spend their time in SQLite, not malloc. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 256 * 1024);
	mallopt(M_ARENA_MAX, 1);
	rc = queryd_parse(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	log_set_level(cfg.log_level);
	if (!cfg.control[0] &&
	    (size_t)snprintf(cfg.control, sizeof(cfg.control), "%s.ctl", cfg.db) >= sizeof(cfg.control)) {
		log_error("--db path too long");
		return 2;
	}
	/* SQLite's own words for this case ("unable to open database file") say too little */
	if (access(cfg.db, F_OK) < 0) {
		log_error("database %s: %s (start the agent or run tallyctl once to create it)",
		          cfg.db, strerror(errno));
		return 1;
	}
	scfg = (struct server_config){ .listen = cfg.listen, .db_path = cfg.db,
	                               .control_path = cfg.control,
	                               .static_dir = cfg.static_dir[0] ? cfg.static_dir : NULL,
	                               .threads = cfg.threads };
	if (cfg.token_file[0]) {
		if (queryd_read_token(cfg.token_file, token, sizeof(token)) < 0)
			return 1;
		scfg.token = token;
	} else if (env && *env) {
		scfg.token = env;
	} else {
		log_warn("TALLY_OPERATOR_TOKEN is not set (nor --token-file): queryd serves no data, "
		         "only /api/health and the dashboard's files");
	}

	/* Every thread MHD starts inherits this mask: the signals come to sigwait here. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);

	srv = server_start(&scfg, err, sizeof(err));
	explicit_bzero(token, sizeof(token));   /* the server keeps its own copy */
	if (!srv) {
		log_error("%s", err);
		return 1;
	}
	log_info("tally-queryd listening on http://%s (database %s, %d threads, dashboard %s)",
	         cfg.listen, cfg.db, cfg.threads, scfg.static_dir ? scfg.static_dir : "built in");
	while (sigwait(&stop, &sig) != 0)
		;
	log_info("signal %d: stopping", sig);
	server_stop(srv);
	return 0;
}
