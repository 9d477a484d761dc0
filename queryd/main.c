/* tally-queryd: the dashboard's and the JSON API's server over the tally database,
 * read only (docs/api.md). The main thread parses the flags, reads the operator
 * token, starts the server (server.c: MHD's thread pool does the rest) and waits for
 * SIGINT or SIGTERM to stop it; with --self-check it runs selfcheck.c's checks
 * instead and starts nothing. */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daycache.h"
#include "db.h"
#include "log.h"
#include "selfcheck.h"
#include "server.h"
#include "token.h"

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

/* PostgreSQL: every statement queryd prepares filters by parameters that may be absent
 * ("CAST(:model AS TEXT) IS NULL OR r.model = :model"). Only a plan made for the values
 * at hand (a custom plan) drops the absent filters and walks the index in order; after
 * five runs PostgreSQL may keep a generic plan, which cannot (a sort of the whole range
 * instead of a page's rows). PGOPTIONS reaches every connection libpq opens, a reconnection
 * too; options the operator put there are kept. 0, or -1 out of memory. */
static int queryd_pg_options(void)
{
	static const char custom[] = "-c plan_cache_mode=force_custom_plan";
	const char *given = getenv("PGOPTIONS");
	char *both;
	int rc;

	if (!given || !*given)
		return setenv("PGOPTIONS", custom, 1);
	if (asprintf(&both, "%s %s", given, custom) < 0)
		return -1;
	rc = setenv("PGOPTIONS", both, 1);
	free(both);
	return rc;
}

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
	{ "db", "PATH|URL", "tally store, opened read only: a SQLite database path or a postgresql:// URL; must exist at the current schema (default ./data/tally.db)", queryd_set_db },
	{ "listen", "HOST:PORT", "HTTP listen address (default 127.0.0.1:8081)", queryd_set_listen },
	{ "control", "PATH", "the agent's control socket, for /api/live (default: the database path + .ctl; none for a URL)", queryd_set_control },
	{ "threads", "N", "HTTP worker threads, each with its own database connection (default 4, at most 64)", queryd_set_threads },
	{ "static", "DIR", "serve the dashboard's files from DIR instead of the built-in copy", queryd_set_static },
	{ "token-file", "PATH", "read the operator token from PATH (default: $TALLY_OPERATOR_TOKEN)", queryd_set_token_file },
	{ "log-level", "LEVEL", "error, warn, info or debug (default info)", queryd_set_log_level },
};

#define QUERYD_SELF_CHECK 1000   /* getopt value of --self-check */
#define QUERYD_HELP       1001   /* of --help */

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
	fprintf(out, "  --self-check\n      check what a start needs (flags, database, operator token, listen\n"
	        "      address, dashboard) without starting or writing anything: a line per\n"
	        "      check, exit 0 if all pass, 1 if not\n");
	fprintf(out, "  --help\n      this text\n");
}

/* 0, 1 for --help (printed), -1 on a usage error (described in err). *self_check is set
 * when --self-check is given, even on an error. */
static int queryd_parse(struct queryd_config *cfg, int argc, char **argv, int *self_check,
                        char *err, size_t errlen)
{
	struct option opts[QUERYD_NFLAGS + 3];
	size_t i;
	int c, idx;

	for (i = 0; i < QUERYD_NFLAGS; i++)
		opts[i] = (struct option){ queryd_flags[i].name, required_argument, NULL, (int)i };
	opts[QUERYD_NFLAGS] = (struct option){ "self-check", no_argument, NULL, QUERYD_SELF_CHECK };
	opts[QUERYD_NFLAGS + 1] = (struct option){ "help", no_argument, NULL, QUERYD_HELP };
	opts[QUERYD_NFLAGS + 2] = (struct option){ NULL, 0, NULL, 0 };
	/* First pass: only whether to check, so that a bad flag is reported as a check. */
	opterr = 0;
	*self_check = 0;
	while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1)
		if (c == QUERYD_SELF_CHECK)
			*self_check = 1;
	/* Second pass: the flags; problems are reported here, not by getopt (":" tells a
	 * missing value from an unknown option). */
	optind = 1;
	while ((c = getopt_long(argc, argv, ":", opts, &idx)) != -1) {
		if (c == QUERYD_HELP) {
			queryd_usage(stdout);
			return 1;
		}
		if (c == QUERYD_SELF_CHECK)
			continue;
		if (c == ':') {
			snprintf(err, errlen, "option '%s' needs a value", argv[optind - 1]);
			return -1;
		}
		if (c < 0 || (size_t)c >= QUERYD_NFLAGS) {
			if (optopt > 0 && optopt < 256)
				snprintf(err, errlen, "unknown option '-%c' (tally-queryd --help lists them)",
				         optopt);
			else
				snprintf(err, errlen, "unknown option '%s' (tally-queryd --help lists them)",
				         argv[optind - 1]);
			return -1;
		}
		if (queryd_flags[c].apply(cfg, optarg) < 0) {
			snprintf(err, errlen, "bad value for --%s: %s", queryd_flags[c].name, optarg);
			return -1;
		}
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument %s", argv[optind]);
		return -1;
	}
	/* A PostgreSQL store is shared by many agents, none of them at a path of its own. */
	if (!cfg->control[0] && !db_is_postgres(cfg->db) &&
	    (size_t)snprintf(cfg->control, sizeof(cfg->control), "%s.ctl", cfg->db) >=
	    sizeof(cfg->control)) {
		snprintf(err, errlen, "--db path too long");
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
	char err[4608], shown[QUERYD_PATH_MAX];
	int rc, sig, self_check;
	unsigned long served = 0;

	/* Idle memory after busy hours: glibc's adaptive thresholds keep a large answer's
	 * blocks (a 30-day hourly summary is ~250 KB of JSON) after it is freed, and each
	 * pool thread gets an arena of its own that is never trimmed. One arena, fixed
	 * thresholds: after the dashboard's calls on 10M rows idle RSS went from 11.5 to
	 * 9.0 MiB (7.4 at start); the requests spend their time in SQLite, not malloc. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	mallopt(M_TRIM_THRESHOLD, 256 * 1024);
	mallopt(M_ARENA_MAX, 1);
	/* libpq's default gssencmode=prefer starts Kerberos in every connection even with no
	 * ticket: ~0.8 MB of krb5 and GSSAPI pages stayed resident (bench-queryd on
	 * PostgreSQL: VmRSS 10.1 -> 9.4 MiB). Only the default: PGGSSENCMODE in the
	 * environment or gssencmode in the URL still chooses. */
	setenv("PGGSSENCMODE", "disable", 0);
	rc = queryd_parse(&cfg, argc, argv, &self_check, err, sizeof(err));
	if (rc > 0)
		return 0;
	if (rc < 0 && self_check)
		return selfcheck_queryd(stdout, NULL, err);
	if (rc < 0) {
		fprintf(stderr, "tally-queryd: %s\n", err);
		return 2;
	}
	if (self_check) {
		struct selfcheck_queryd c = {
			.db = cfg.db,
			.listen = cfg.listen,
			.token_file = cfg.token_file[0] ? cfg.token_file : NULL,
			.token_env = env,
			.static_dir = cfg.static_dir[0] ? cfg.static_dir : NULL,
		};

		return selfcheck_queryd(stdout, &c, NULL);
	}
	log_set_level(cfg.log_level);
	/* SQLite's own words for this case ("unable to open database file") say too little */
	if (!db_is_postgres(cfg.db) && access(cfg.db, F_OK) < 0) {
		log_error("database %s: %s (start the agent or run tallyctl once to create it)",
		          cfg.db, strerror(errno));
		return 1;
	}
	if (db_is_postgres(cfg.db) && queryd_pg_options() < 0) {
		log_error("out of memory");
		return 1;
	}
	scfg = (struct server_config){ .listen = cfg.listen, .db_path = cfg.db,
	                               .control_path = cfg.control[0] ? cfg.control : NULL,
	                               .static_dir = cfg.static_dir[0] ? cfg.static_dir : NULL,
	                               .threads = cfg.threads };
	if (cfg.token_file[0]) {
		if (token_read_file(cfg.token_file, token, sizeof(token), err, sizeof(err)) < 0) {
			log_error("%s", err);
			return 1;
		}
		/* --self-check refuses such a file; a start keeps working as it always has. */
		if (token_file_private(cfg.token_file, err, sizeof(err)) < 0)
			log_warn("%s", err);
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
	db_store_name(cfg.db, shown, sizeof(shown));
	log_info("tally-queryd listening on http://%s (database %s, %d threads, dashboard %s)",
	         cfg.listen, shown, cfg.threads, scfg.static_dir ? scfg.static_dir : "built in");
	/* Once a second after requests, the heap's free pages go back to the system: the
	 * trim threshold frees only the heap's top, and after the dashboard's calls on 10M
	 * rows ~1 MB of freed answers stayed resident under blocks still in use (SQLite's
	 * pages and statements). At most one trim a second, off the request path. */
	while ((sig = sigtimedwait(&stop, NULL, &(struct timespec){ .tv_sec = 1 })) < 0) {
		unsigned long now_served = server_served(srv);

		if (now_served != served) {
			served = now_served;
			malloc_trim(0);
		}
	}
	log_info("signal %d: stopping", sig);
	server_stop(srv);
	daycache_clear();
	return 0;
}
