/* haproxycfg: HAProxy's configuration read as HAProxy reads it, for tally-agent
 * --self-check (selfcheck.c): the lines it would read, split into words, and the few
 * things the check asks of them (server, ring and log addresses, filter spoe lines, an
 * SPOE configuration's use-backend). Pure functions over text; main thread.
 *
 * Lines are split as HAProxy 2.6 and later split them: double and single quotes,
 * backslash escapes, # comments, and $NAME, ${NAME}, ${NAME-default} (the default when
 * NAME is unset, not when it is empty) and ${NAME[*]} expanded inside double quotes
 * only. .if/.elif/.else/.endif blocks are followed where the condition can be
 * evaluated here (numbers, defined, streq, strneq, strstr, !, &&, ||, parentheses) and
 * counted in where it cannot (version_atleast, feature, ...): a line is left out only
 * when HAProxy surely skips it. Sections start at HAProxy's section keywords. */
#ifndef TALLY_HAPROXYCFG_H
#define TALLY_HAPROXYCFG_H

#include <stddef.h>

#include "config.h"

/* Where variables come from: get returns a variable's value, or NULL when unset. */
struct haproxycfg_env {
	const char *(*get)(void *arg, const char *name);
	void *arg;
};

#define HAPROXYCFG_MAX_WORDS 64        /* HAProxy's MAX_LINE_ARGS */
#define HAPROXYCFG_LINE_MAX  16384     /* a line once expanded, its terminators included */

/* One line split into words. */
struct haproxycfg_words {
	int n;
	char *w[HAPROXYCFG_MAX_WORDS];
	char unset[64];                 /* the first variable named that is unset and has no
	                                 * default ("" if none) */
	char buf[HAPROXYCFG_LINE_MAX];
};

/* Splits line[0..len) (it ends there or at a newline) into out as HAProxy would. The
 * pseudo-variables .LINE, .FILE and .SECTION expand to nothing. Returns the number of
 * words, or -1 with why in err: an unterminated quote, an unmatched brace, a bad
 * variable name or escape, too many words, too long once expanded. */
int haproxycfg_split(const char *line, size_t len, const struct haproxycfg_env *env,
                     struct haproxycfg_words *out, char *err, size_t errlen);

/* 1 if the HAProxy address hap (a server address or log target: host:port after an
 * optional ipv4@, ipv6@, tcp@, tcp4@, tcp6@, udp@, udp4@ or udp6@; [v6]:port; unix@/path
 * or /path) reaches the agent's address agent (host:port, [v6]:port or unix:/path, as
 * --listen and --records take them), else 0. Hosts are compared as written, case
 * aside, not resolved; an agent on a wildcard host (0.0.0.0, ::, * or none) is reached
 * by any host with its port. A log target without a port has port 514. */
int haproxycfg_addr_match(const char *agent, const char *hap);

enum haproxycfg_what {
	HAPROXYCFG_SERVER,   /* a server line of a backend or listen section */
	HAPROXYCFG_RING,     /* a server line of a ring section */
	HAPROXYCFG_LOG,      /* the target of a log line, in any section */
};

struct haproxycfg_found {
	int line;               /* where it is; 0: nowhere */
	char section[128];      /* found: the backend, listen or ring section's name */
	char server[128];       /* found SERVER or RING: the server's name */
	int section_seen;       /* SERVER in a named backend: the file defines that backend */
	int ring_used;          /* found RING: some log line sends to ring@<section> */
	char others[256];       /* not found: the addresses the lines looked at name instead,
	                         * ", "-separated, "..." when there are more */
	char unset[64];         /* a variable those lines name that is unset, "" if none */
	char err[256];          /* -1: why the file cannot be read as HAProxy reads it */
};

/* Looks for the agent's address addr (haproxycfg_addr_match) in the HAProxy
 * configuration text[0..len), where what says. For SERVER, backend names the backend
 * (or listen section) to look in, NULL for any. For RING, a ring some log line uses is
 * preferred to one none does. Returns 1 (found: out says where), 0 (not found: out
 * says what is there instead), or -1 (out->err says why the text is unreadable; an
 * .alert that HAProxy surely reaches counts: it refuses to start). */
int haproxycfg_find(const char *text, size_t len, enum haproxycfg_what what,
                    const char *addr, const char *backend, const struct haproxycfg_env *env,
                    struct haproxycfg_found *out);

/* A `filter spoe [engine NAME] config FILE` line. */
struct haproxycfg_spoe {
	int line;
	char config[CONFIG_PATH_MAX];   /* the SPOE configuration file, as written */
	char engine[128];               /* "" when the line names no engine */
};

/* The filter spoe lines of the HAProxy configuration text[0..len), at most max of them
 * into out. Returns how many, or -1 with err. */
int haproxycfg_spoe_filters(const char *text, size_t len, const struct haproxycfg_env *env,
                            struct haproxycfg_spoe *out, int max, char *err, size_t errlen);

/* The backend named by use-backend in a spoe-agent section of the SPOE configuration
 * text[0..len), read as HAProxy reads it for engine ("": the lines outside any [scope];
 * else those inside [engine]). Returns 1 with the name in out, 0 when there is none,
 * -1 with err. */
int haproxycfg_spoe_backend(const char *text, size_t len, const char *engine,
                            const struct haproxycfg_env *env, char *out, size_t cap, char *err,
                            size_t errlen);

#endif
