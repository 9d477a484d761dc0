/* config: parses the agent's flags and configuration file (main thread, at start).
 * One table describes every setting, so the file, the flags and --help cannot drift;
 * --config, --self-check and --help are the command line's own. */
#include "config.h"
#include "writer.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "keytable.h"
#include "tier.h"

struct config_setting {
	const char *name;
	const char *arg;
	const char *help;
	int (*apply)(struct agent_config *cfg, const char *value);
};

static int config_int(const char *value, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno || end == value || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int config_copy(char *dst, const char *value)
{
	size_t len = strlen(value);

	if (len == 0 || len >= CONFIG_PATH_MAX)
		return -1;
	memcpy(dst, value, len + 1);
	return 0;
}

static int config_set_listen(struct agent_config *cfg, const char *value)
{
	if (cfg->nlisten == CONFIG_MAX_LISTEN)
		return -1;
	if (config_copy(cfg->listen[cfg->nlisten], value) < 0)
		return -1;
	cfg->nlisten++;
	return 0;
}

static int config_set_threads(struct agent_config *cfg, const char *value)
{
	long v;

	if (config_int(value, 1, CONFIG_MAX_THREADS, &v) < 0)
		return -1;
	cfg->threads = (int)v;
	return 0;
}

static int config_set_db(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->db_path, value);
}

/* A node's name: its accounting row's key, and a part of file names derived from it. */
static int config_set_node(struct agent_config *cfg, const char *value)
{
	size_t len = strlen(value);

	if (len == 0 || len >= sizeof(cfg->node) || strspn(value, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != len)
		return -1;
	memcpy(cfg->node, value, len + 1);
	return 0;
}

static int config_set_secret(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->secret_path, value);
}

static int config_set_log_level(struct agent_config *cfg, const char *value)
{
	return log_level_parse(value, &cfg->log_level);
}

static int config_set_max_frame_size(struct agent_config *cfg, const char *value)
{
	long v;

	/* 256 is SPOP's floor; HAProxy's frames are at most tune.bufsize - 4, and a
	 * tune.bufsize beyond 1 MiB would cost every HAProxy stream that much. */
	if (config_int(value, 256, 1024 * 1024, &v) < 0)
		return -1;
	cfg->max_frame_size = (uint32_t)v;
	return 0;
}

static int config_ms(const char *value, long min, long max, int *out)
{
	long v;

	if (config_int(value, min, max, &v) < 0)
		return -1;
	*out = (int)v;
	return 0;
}

static int config_set_reload_interval(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 10, 60000, &cfg->reload_interval_ms);
}

static int config_set_lease_interval(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 10, 10000, &cfg->lease_interval_ms);
}

static int config_set_lease_ttl(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 100, 600000, &cfg->lease_ttl_ms);
}

static int config_set_lease_hold(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 3600000, &cfg->lease_hold_ms);
}

static int config_set_lease_wait(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 1000, &cfg->lease_wait_ms);
}

static int config_set_max_connections(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, 1000000, &cfg->max_connections);
}

static int config_set_max_unauthenticated(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, 1000000, &cfg->max_unauthenticated);
}

/* Octal, as chmod takes it: who may connect to the agent's unix sockets. */
static int config_set_unix_mode(struct agent_config *cfg, const char *value)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(value, &end, 8);
	if (errno || end == value || *end || v < 0600 || v > 0777)
		return -1;
	cfg->unix_mode = (unsigned)v;
	return 0;
}

static int config_set_auth_timeout(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 10, 600000, &cfg->auth_timeout_ms);
}

static int config_set_idle_timeout(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1000, 86400000, &cfg->idle_timeout_ms);
}

static int config_set_records(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->records_addr, value);
}

static int config_set_metrics(struct agent_config *cfg, const char *value)
{
	/* "off" disables: an empty value cannot be written in the file format. */
	if (strcmp(value, "off") == 0) {
		cfg->metrics_addr[0] = '\0';
		return 0;
	}
	return config_copy(cfg->metrics_addr, value);
}

static int config_set_control(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->control_path, value);
}

static int config_set_journal(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->journal_dir, value);
}

static int config_set_queue_capacity(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, 16 * 1024 * 1024, &cfg->queue_capacity);
}

static int config_set_batch_max(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, WRITER_BATCH_MAX, &cfg->batch_max);
}

static int config_set_write_retry(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 86400000, &cfg->write_retry_ms);
}

static int config_set_spill_max(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 1024 * 1024, &cfg->spill_max_mb);
}

static int config_set_pending_timeout(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 100, 86400000, &cfg->pending_timeout_ms);
}

static int config_set_pending_max(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 16, 64 * 1024 * 1024, &cfg->pending_max);
}

static int config_set_long_body_memory(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 1024 * 1024 * 1024, &cfg->long_body_memory);
}

static int config_set_long_body_key_memory(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 1024 * 1024 * 1024, &cfg->long_body_key_memory);
}

static int config_set_max_body(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 0, 1024 * 1024 * 1024, &cfg->max_body);
}

static int config_set_stored_responses(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, 64 * 1024 * 1024, &cfg->stored_responses);
}

static int config_set_default_max_tokens(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1, 10000000, &cfg->default_max_tokens);
}

/* A comma-separated list of tier names (tier.h), or "" for none. */
static int config_set_service_tiers(struct agent_config *cfg, const char *value)
{
	if (*value && !tier_list_ok(value))
		return -1;
	return config_copy(cfg->service_tiers, value);
}

static int config_policy(const char *value, enum kt_policy *out)
{
	*out = keytable_policy_of(value);
	return *out == KT_POLICY_INHERIT ? -1 : 0;
}

static int config_set_server_tools(struct agent_config *cfg, const char *value)
{
	return config_policy(value, &cfg->server_tools);
}

static int config_set_audio(struct agent_config *cfg, const char *value)
{
	return config_policy(value, &cfg->audio);
}

static int config_set_cache_writes(struct agent_config *cfg, const char *value)
{
	return config_policy(value, &cfg->cache_writes);
}

static int config_set_dedupe(struct agent_config *cfg, const char *value)
{
	return config_ms(value, 1000, 86400000, &cfg->dedupe_ms);
}

static int config_set_haproxy_cfg(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->haproxy_cfg, value);
}

static int config_set_haproxy_socket(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->haproxy_socket, value);
}

static int config_set_haproxy_ring(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->haproxy_ring, value);
}

static int config_set_db_max_pages(struct agent_config *cfg, const char *value)
{
	long v;

	if (config_int(value, 0, 2147483647, &v) < 0)
		return -1;
	cfg->db_max_pages = v;
	return 0;
}

static const struct config_setting settings[] = {
	{ "listen", "ADDR", "SPOP listen address, host:port or unix:/path; repeatable (default 127.0.0.1:12345)", config_set_listen },
	{ "threads", "N", "I/O threads, one libev loop each (default 2)", config_set_threads },
	{ "db", "STORE", "SQLite database path, or a postgresql:// URL shared by every node; created or migrated at start (default ./data/tally.db)", config_set_db },
	{ "node", "NAME", "this agent's name in the store, keying its accounting counters; letters, digits, '.', '-', '_' (default: local on SQLite, the host name on PostgreSQL)", config_set_node },
	{ "secret", "PATH", "key-hashing secret file (default: the database path + .secret; with a postgresql:// --db it must be given, the same file on every node)", config_set_secret },
	{ "log-level", "LEVEL", "error, warn, info or debug (default info)", config_set_log_level },
	{ "max-frame-size", "BYTES", "largest SPOP frame accepted (default 16380, HAProxy's tune.bufsize - 4)", config_set_max_frame_size },
	{ "reload-interval-ms", "MS", "how often key and model changes are looked for (default 250)", config_set_reload_interval },
	{ "lease-interval-ms", "MS", "PostgreSQL: how often this node syncs its share of the keys' limits with the store (default 100)", config_set_lease_interval },
	{ "lease-ttl-ms", "MS", "PostgreSQL: a node without a sync this long counts its limits locally, at its share (default 3000)", config_set_lease_ttl },
	{ "lease-hold-ms", "MS", "PostgreSQL: a node's concurrency slots stay counted this long after its lease expired (its HAProxy may still stream while its agent is stalled or dead), then return to the others (default 60000)", config_set_lease_hold },
	{ "lease-wait-ms", "MS", "PostgreSQL: how long a decision may wait for its key's share when this node's ran out and the cluster's has room; 0: never (default 20)", config_set_lease_wait },
	{ "max-connections", "N", "SPOP connections that showed the gateway secret, at once, over all threads (default 4096)", config_set_max_connections },
	{ "max-unauthenticated", "N", "SPOP connections that have not shown it yet, at once, over all threads; beyond, the oldest is closed for a new one (default 1024)", config_set_max_unauthenticated },
	{ "auth-timeout-ms", "MS", "time a new SPOP connection has to show the gateway secret (its HELLO, then a NOTIFY carrying it) before it is closed (default 2000)", config_set_auth_timeout },
	{ "idle-timeout-ms", "MS", "close a connection silent this long (default 300000; HAProxy's own idle timeout should be shorter)", config_set_idle_timeout },
	{ "records", "ADDR", "host:port receiving HAProxy's end-of-transaction records, TCP and UDP, or unix:/path, a stream socket there and a datagram one at /path.dgram (default 127.0.0.1:12346)", config_set_records },
	{ "unix-mode", "MODE", "octal mode of the unix sockets of --listen and --records, 0600 to 0777 (default 0660: the owner and its group, e.g. HAProxy's)", config_set_unix_mode },
	{ "metrics", "ADDR", "host:port serving Prometheus metrics at /metrics, or off (default 127.0.0.1:9464)", config_set_metrics },
	{ "control", "PATH", "unix socket answering msgpack requests for live state (default: the database path + .ctl; on PostgreSQL ./data/tally-NODE.ctl)", config_set_control },
	{ "journal", "DIR", "journal of decisions and rows not yet written (default: the database path + .journal; on PostgreSQL ./data/tally-NODE.journal)", config_set_journal },
	{ "queue-capacity", "N", "rows waiting for the writer in memory; beyond it rows wait on disk (--spill-max-mb) (default 65536)", config_set_queue_capacity },
	{ "batch-max", "N", "rows per writer transaction at most (default 8192)", config_set_batch_max },
	{ "write-retry-ms", "MS", "how long a failing batch is retried before its rows wait on disk for the store (default 10000)", config_set_write_retry },
	{ "spill-max-mb", "MB", "rows waiting on disk (the journal directory's spill file) while the store fails or the writer is behind, at most; beyond it rows are dropped and counted; 0: none wait (default 1024)", config_set_spill_max },
	{ "pending-timeout-ms", "MS", "wait this long for a decided request's record, then write it as no_record (default 900000)", config_set_pending_timeout },
	{ "dedupe-ms", "MS", "remember record ids this long to count second copies as duplicates (default 600000)", config_set_dedupe },
	{ "long-body-memory", "BYTES", "request bodies longer than one SPOP frame held for their decision (HAProxy 3.4+), at most; 0 judges them on their first frame (default 67108864)", config_set_long_body_memory },
	{ "long-body-key-memory", "BYTES", "of --long-body-memory, what the bodies of one key hold at most, so that one key's stalled long bodies leave room to the others (default 8388608: 4 bodies in HAProxy's 2 MiB large buffers)", config_set_long_body_key_memory },
	{ "max-body", "BYTES", "request bodies longer than this are refused with 413 body_too_large (HAProxy refuses them too: TALLY_MAX_BODY); 0: no cap (default 4194304)", config_set_max_body },
	{ "stored-responses", "N", "ids of stored responses (Responses API) whose key the agent remembers, at most; past it the oldest is forgotten and its key gets 404 for it (default 262144)", config_set_stored_responses },
	{ "pending-max", "N", "decided requests awaiting their record, at most; beyond it requests are refused with 503 and counted (default 131072)", config_set_pending_max },
	{ "default-max-tokens", "N", "output tokens a limited key's request reserves when it names no max_tokens (default 4096)", config_set_default_max_tokens },
	{ "service-tiers", "LIST", "service tiers a request may ask for, comma-separated, for keys without their own list (default: every tier the model has prices for)", config_set_service_tiers },
	{ "server-tools", "POLICY", "tools the provider runs (web search, ...) for keys without their own policy: priced (while the model prices them), allow or deny (default priced)", config_set_server_tools },
	{ "audio", "POLICY", "audio input or output for keys without their own policy: priced, allow or deny (default priced)", config_set_audio },
	{ "cache-writes", "POLICY", "prompt cache writes asked for (cache_control) for keys without their own policy: priced (refused when the model's card has no cache-write price), allow (charged at the card's dearest token rate when it has none) or deny (default allow)", config_set_cache_writes },
	{ "db-max-pages", "N", "cap a SQLite database at N pages (PRAGMA max_page_count; 0: no cap; not used on PostgreSQL)", config_set_db_max_pages },
	{ "haproxy-socket", "PATH", "HAProxy's CLI (a stats socket of level operator): the records ring's backlog is read from it at start and when the ring reconnects, since HAProxy 3.x's ring does not resend it (default: none)", config_set_haproxy_socket },
	{ "haproxy-ring", "NAME", "the records ring's name in tally.cfg (default tally-records)", config_set_haproxy_ring },
	{ "haproxy-cfg", "PATH", "with --self-check: check that this HAProxy configuration sends to the SPOP and records addresses", config_set_haproxy_cfg },
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static void config_usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: tally-agent [--config FILE] [options]\n\n"
	             "The tally SPOE agent: decides every request HAProxy sends it.\n\n"
	             "  --config FILE             read settings from FILE: one 'name value' per line,\n"
	             "                            names as the long options below, # starts a comment;\n"
	             "                            flags given on the command line win\n"
	             "  --self-check              check what a start needs (configuration, database,\n"
	             "                            secrets, listeners, --haproxy-cfg) without starting or\n"
	             "                            writing anything: a line per check, exit 0 if all pass\n");
	for (i = 0; i < NSETTINGS; i++) {
		char left[64];

		snprintf(left, sizeof(left), "--%s %s", settings[i].name, settings[i].arg);
		fprintf(out, "  %-25s %s\n", left, settings[i].help);
	}
	fprintf(out, "  %-25s %s\n", "--help", "show this help");
}

static const struct config_setting *config_find(const char *name)
{
	size_t i;

	for (i = 0; i < NSETTINGS; i++)
		if (strcmp(settings[i].name, name) == 0)
			return &settings[i];
	return NULL;
}

static int config_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Puts the problem into err; always -1. */
static int config_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int config_apply(struct agent_config *cfg, const struct config_setting *s, const char *value,
                        const char *where, char *err, size_t errlen)
{
	if (s->apply == config_set_listen && cfg->nlisten == CONFIG_MAX_LISTEN)
		return config_error(err, errlen, "%s: at most %d listen addresses", where,
		                    CONFIG_MAX_LISTEN);
	if (s->apply(cfg, value) == 0)
		return 0;
	if (s->apply == config_set_db)   /* a URL may hold a password: not repeated */
		return config_error(err, errlen, "%s: invalid value for db (empty, or %d bytes or "
		                    "more)", where, CONFIG_PATH_MAX);
	return config_error(err, errlen, "%s: invalid value '%s' for %s", where, value, s->name);
}

static int config_read_file(struct agent_config *cfg, const char *path, char *err, size_t errlen)
{
	char line[CONFIG_PATH_MAX + 64], where[CONFIG_PATH_MAX + 32];
	FILE *f = fopen(path, "r");
	int lineno = 0, ret = -1;

	if (!f)
		return config_error(err, errlen, "cannot open %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char *name, *value, *end;
		size_t len = strlen(line);
		const struct config_setting *s;

		lineno++;
		snprintf(where, sizeof(where), "%s:%d", path, lineno);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			config_error(err, errlen, "%s: line too long", where);
			goto out;
		}
		/* "name value" or "name = value"; the value is the rest of the line, so paths
		 * may hold spaces, '=' or '#'. Only whole lines starting with # are comments. */
		name = line + strspn(line, " \t");
		if (*name == '#' || *name == '\n' || *name == '\0')
			continue;
		value = name + strcspn(name, " \t=\r\n");
		end = value + strspn(value, " \t");
		if (*end == '=')
			end += 1 + strspn(end + 1, " \t");
		*value = '\0';
		value = end;
		end = value + strlen(value);
		while (end > value && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (!(s = config_find(name))) {
			config_error(err, errlen, "%s: unknown setting '%s'", where, name);
			goto out;
		}
		if (!*value) {
			config_error(err, errlen, "%s: '%s' needs a value", where, name);
			goto out;
		}
		if (config_apply(cfg, s, value, where, err, errlen) < 0)
			goto out;
	}
	ret = 0;
out:
	fclose(f);
	return ret;
}

static void config_defaults(struct agent_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->threads = 2;
	snprintf(cfg->db_path, sizeof(cfg->db_path), "./data/tally.db");
	cfg->log_level = LOG_INFO;
	cfg->max_frame_size = 16380;
	cfg->reload_interval_ms = 250;
	cfg->lease_interval_ms = 100;
	cfg->lease_ttl_ms = 3000;
	cfg->lease_hold_ms = 60000;
	cfg->lease_wait_ms = 20;
	cfg->max_connections = 4096;
	cfg->max_unauthenticated = 1024;
	cfg->unix_mode = 0660;
	cfg->auth_timeout_ms = 2000;
	cfg->idle_timeout_ms = 300000;
	snprintf(cfg->records_addr, sizeof(cfg->records_addr), "127.0.0.1:12346");
	snprintf(cfg->metrics_addr, sizeof(cfg->metrics_addr), "127.0.0.1:9464");
	cfg->queue_capacity = 65536;
	cfg->pending_max = 131072;
	cfg->long_body_memory = 64 * 1024 * 1024;
	cfg->long_body_key_memory = 8 * 1024 * 1024;
	cfg->max_body = 4 * 1024 * 1024;
	cfg->stored_responses = 262144;
	cfg->batch_max = WRITER_BATCH_DEFAULT;
	cfg->write_retry_ms = 10000;
	cfg->spill_max_mb = 1024;
	cfg->pending_timeout_ms = 900000;
	cfg->dedupe_ms = 600000;
	cfg->default_max_tokens = 4096;
	cfg->server_tools = cfg->audio = KT_POLICY_PRICED;
	/* Clients such as Claude Code mark every prompt for the cache: refusing them by
	 * default would refuse those clients on any card without a cache-write price. */
	cfg->cache_writes = KT_POLICY_ALLOW;
	snprintf(cfg->haproxy_ring, sizeof(cfg->haproxy_ring), "tally-records");
}

/* What the store decides: the node's name, and the files named after the database
 * path, which a PostgreSQL URL cannot give (nor, shared by every node, a secret). */
static int config_store_defaults(struct agent_config *cfg, char *err, size_t errlen)
{
	int pg = db_is_postgres(cfg->db_path);
	char host[256] = "", base[CONFIG_PATH_MAX];

	if (!cfg->node[0] && !pg) {
		snprintf(cfg->node, sizeof(cfg->node), "local");
	} else if (!cfg->node[0] && (gethostname(host, sizeof(host) - 1) < 0 ||
	                             config_set_node(cfg, host) < 0)) {
		config_error(err, errlen, "the host name is no node name: give --node");
		return -1;
	}
	if (pg && !cfg->secret_path[0]) {
		config_error(err, errlen, "--db is a PostgreSQL URL: give --secret, the key-hashing "
		             "secret file every node and tallyctl share");
		return -1;
	}
	if (pg)
		snprintf(base, sizeof(base), "./data/tally-%s", cfg->node);
	else
		memcpy(base, cfg->db_path, sizeof(base));
	if ((!cfg->control_path[0] &&
	     snprintf(cfg->control_path, CONFIG_PATH_MAX, "%s.ctl", base) >= CONFIG_PATH_MAX) ||
	    (!cfg->journal_dir[0] &&
	     snprintf(cfg->journal_dir, CONFIG_PATH_MAX, "%s.journal", base) >= CONFIG_PATH_MAX)) {
		config_error(err, errlen, "database path too long to derive the control socket and "
		             "journal paths from (give --control and --journal)");
		return -1;
	}
	return 0;
}

enum config_result config_parse(struct agent_config *cfg, int argc, char **argv, char *err,
                                size_t errlen)
{
	struct option opts[NSETTINGS + 4];
	const char *config_file = NULL;
	int i, c, nflag_listen = 0;

	config_defaults(cfg);
	for (i = 0; i < (int)NSETTINGS; i++)
		opts[i] = (struct option){ settings[i].name, required_argument, NULL, 1000 + i };
	opts[NSETTINGS] = (struct option){ "config", required_argument, NULL, 'c' };
	opts[NSETTINGS + 1] = (struct option){ "self-check", no_argument, NULL, 's' };
	opts[NSETTINGS + 2] = (struct option){ "help", no_argument, NULL, 'h' };
	opts[NSETTINGS + 3] = (struct option){ NULL, 0, NULL, 0 };

	/* First pass finds --config so that the file applies before, and under, the flags,
	 * and --self-check so that even a configuration that fails is reported as a check. */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'c')
			config_file = optarg;
		else if (c == 's')
			cfg->self_check = 1;
	}
	if (config_file) {
		if (config_copy(cfg->config_file, config_file) < 0) {
			config_error(err, errlen, "--config: path too long");
			return CONFIG_ERROR;
		}
		if (config_read_file(cfg, config_file, err, errlen) < 0)
			return CONFIG_ERROR;
	}

	/* Second pass: the flags, over the file. Problems are reported here, not by getopt
	 * (":" tells a missing value from an unknown option). */
	optind = 1;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		const struct config_setting *s;

		if (c == 'h') {
			config_usage(stdout);
			return CONFIG_EXIT_OK;
		}
		if (c == 'c' || c == 's')
			continue;
		if (c == ':') {
			config_error(err, errlen, "option '%s' needs a value", argv[optind - 1]);
			return CONFIG_ERROR;
		}
		if (c < 1000 || c >= 1000 + (int)NSETTINGS) {
			if (optopt > 0 && optopt < 256)
				config_error(err, errlen, "unknown option '-%c' (tally-agent --help lists "
				             "them)", optopt);
			else
				config_error(err, errlen, "unknown option '%s' (tally-agent --help lists "
				             "them)", argv[optind - 1]);
			return CONFIG_ERROR;
		}
		s = &settings[c - 1000];
		/* --listen on the command line replaces the file's list instead of adding. */
		if (s->apply == config_set_listen && nflag_listen++ == 0)
			cfg->nlisten = 0;
		if (config_apply(cfg, s, optarg, "command line", err, errlen) < 0)
			return CONFIG_ERROR;
	}
	if (optind < argc) {
		config_error(err, errlen, "unexpected argument '%s'", argv[optind]);
		return CONFIG_ERROR;
	}
	if (cfg->nlisten == 0)
		snprintf(cfg->listen[cfg->nlisten++], CONFIG_PATH_MAX, "127.0.0.1:12345");
	if (config_store_defaults(cfg, err, errlen) < 0)
		return CONFIG_ERROR;
	/* A lease renewed less often than it expires would let its slots go while held. */
	if (cfg->lease_ttl_ms < 2 * cfg->lease_interval_ms) {
		config_error(err, errlen, "--lease-ttl-ms (%d) must be at least twice "
		             "--lease-interval-ms (%d)", cfg->lease_ttl_ms, cfg->lease_interval_ms);
		return CONFIG_ERROR;
	}
	return CONFIG_OK;
}
