/* config: parses the agent's flags and configuration file (main thread, at start).
 * One table describes every setting, so the file, the flags and --help cannot drift. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct setting {
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

static int apply_listen(struct agent_config *cfg, const char *value)
{
	if (cfg->nlisten == CONFIG_MAX_LISTEN)
		return -1;
	if (config_copy(cfg->listen[cfg->nlisten], value) < 0)
		return -1;
	cfg->nlisten++;
	return 0;
}

static int apply_threads(struct agent_config *cfg, const char *value)
{
	long v;

	if (config_int(value, 1, 64, &v) < 0)
		return -1;
	cfg->threads = (int)v;
	return 0;
}

static int apply_db(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->db_path, value);
}

static int apply_secret(struct agent_config *cfg, const char *value)
{
	return config_copy(cfg->secret_path, value);
}

static int apply_log_level(struct agent_config *cfg, const char *value)
{
	return log_level_parse(value, &cfg->log_level);
}

static int apply_max_frame_size(struct agent_config *cfg, const char *value)
{
	long v;

	/* 256 is SPOP's floor; HAProxy's frames are at most tune.bufsize - 4. */
	if (config_int(value, 256, 16 * 1024 * 1024, &v) < 0)
		return -1;
	cfg->max_frame_size = (uint32_t)v;
	return 0;
}

static int apply_reload_interval(struct agent_config *cfg, const char *value)
{
	long v;

	if (config_int(value, 10, 60000, &v) < 0)
		return -1;
	cfg->reload_interval_ms = (int)v;
	return 0;
}

static const struct setting settings[] = {
	{ "listen", "ADDR", "SPOP listen address, host:port or unix:/path; repeatable (default 127.0.0.1:12345)", apply_listen },
	{ "threads", "N", "I/O threads, one libev loop each (default 2)", apply_threads },
	{ "db", "PATH", "SQLite database, created or migrated at start (default ./data/tally.db)", apply_db },
	{ "secret", "PATH", "key-hashing secret file (default: the database path + .secret)", apply_secret },
	{ "log-level", "LEVEL", "error, warn, info or debug (default info)", apply_log_level },
	{ "max-frame-size", "BYTES", "largest SPOP frame accepted (default 16380, HAProxy's tune.bufsize - 4)", apply_max_frame_size },
	{ "reload-interval-ms", "MS", "how often key and model changes are looked for (default 250)", apply_reload_interval },
};

#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static void config_usage(FILE *out)
{
	size_t i;

	fprintf(out, "usage: tally-agent [--config FILE] [options]\n\n"
	             "The tally SPOE agent: decides every request HAProxy sends it.\n\n"
	             "  --config FILE             read settings from FILE: one 'name value' per line,\n"
	             "                            names as the long options below, # starts a comment;\n"
	             "                            flags given on the command line win\n");
	for (i = 0; i < NSETTINGS; i++) {
		char left[64];

		snprintf(left, sizeof(left), "--%s %s", settings[i].name, settings[i].arg);
		fprintf(out, "  %-25s %s\n", left, settings[i].help);
	}
	fprintf(out, "  %-25s %s\n", "--help", "show this help");
}

static const struct setting *config_find(const char *name)
{
	size_t i;

	for (i = 0; i < NSETTINGS; i++)
		if (strcmp(settings[i].name, name) == 0)
			return &settings[i];
	return NULL;
}

static int config_apply(struct agent_config *cfg, const struct setting *s, const char *value,
                        const char *where)
{
	if (s->apply(cfg, value) == 0)
		return 0;
	fprintf(stderr, "tally-agent: %s: invalid value '%s' for %s\n", where, value, s->name);
	return -1;
}

static int config_read_file(struct agent_config *cfg, const char *path)
{
	char line[CONFIG_PATH_MAX + 64], where[CONFIG_PATH_MAX + 32];
	FILE *f = fopen(path, "r");
	int lineno = 0, ret = -1;

	if (!f) {
		fprintf(stderr, "tally-agent: cannot open %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *name, *value, *save = NULL;
		const struct setting *s;

		lineno++;
		snprintf(where, sizeof(where), "%s:%d", path, lineno);
		line[strcspn(line, "#\r\n")] = '\0';
		name = strtok_r(line, " \t=", &save);
		if (!name)
			continue;
		value = strtok_r(NULL, " \t=", &save);
		if (!(s = config_find(name))) {
			fprintf(stderr, "tally-agent: %s: unknown setting '%s'\n", where, name);
			goto out;
		}
		if (!value || strtok_r(NULL, " \t", &save)) {
			fprintf(stderr, "tally-agent: %s: '%s' takes exactly one value\n", where, name);
			goto out;
		}
		if (config_apply(cfg, s, value, where) < 0)
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
}

enum config_result config_parse(struct agent_config *cfg, int argc, char **argv)
{
	struct option opts[NSETTINGS + 3];
	const char *config_file = NULL;
	int i, c, nflag_listen = 0;

	config_defaults(cfg);
	for (i = 0; i < (int)NSETTINGS; i++)
		opts[i] = (struct option){ settings[i].name, required_argument, NULL, 1000 + i };
	opts[NSETTINGS] = (struct option){ "config", required_argument, NULL, 'c' };
	opts[NSETTINGS + 1] = (struct option){ "help", no_argument, NULL, 'h' };
	opts[NSETTINGS + 2] = (struct option){ NULL, 0, NULL, 0 };

	/* First pass finds --config so that the file applies before, and under, the flags. */
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
		if (c == 'c')
			config_file = optarg;
	if (config_file && config_read_file(cfg, config_file) < 0)
		return CONFIG_ERROR;

	opterr = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const struct setting *s;

		if (c == 'h') {
			config_usage(stdout);
			return CONFIG_EXIT_OK;
		}
		if (c == 'c')
			continue;
		if (c < 1000 || c >= 1000 + (int)NSETTINGS) {
			config_usage(stderr);
			return CONFIG_ERROR;
		}
		s = &settings[c - 1000];
		/* --listen on the command line replaces the file's list instead of adding. */
		if (s->apply == apply_listen && nflag_listen++ == 0)
			cfg->nlisten = 0;
		if (config_apply(cfg, s, optarg, "command line") < 0)
			return CONFIG_ERROR;
	}
	if (optind < argc) {
		fprintf(stderr, "tally-agent: unexpected argument '%s'\n", argv[optind]);
		return CONFIG_ERROR;
	}
	if (cfg->nlisten == 0)
		snprintf(cfg->listen[cfg->nlisten++], CONFIG_PATH_MAX, "127.0.0.1:12345");
	return CONFIG_OK;
}
