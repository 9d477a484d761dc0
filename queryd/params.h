/* params: validation of an API request's query parameters (docs/api.md) and the
 * keyset cursor of /api/requests. Pure functions over strings, peer input: any thread
 * (queryd's request threads), fuzzed by tests/fuzz/fuzz_params.c. */
#ifndef QUERYD_PARAMS_H
#define QUERYD_PARAMS_H

#include <stddef.h>
#include <stdint.h>

/* Times a parameter may hold, unix seconds: up to the end of year 9999. */
#define PARAMS_TIME_MAX 253402300799LL
#define PARAMS_LIMIT_MAX 1000
#define PARAMS_LIMIT_DEFAULT 100
#define PARAMS_SUMMARY_MAX_DAYS 400
#define PARAMS_CURSOR_MAX 48   /* "started_at.id" with room for two int64s */

enum params_endpoint {
	PARAMS_NONE,      /* endpoints without parameters: any is unknown */
	PARAMS_SUMMARY,
	PARAMS_REQUESTS,
	PARAMS_EXPORT,
};

enum params_group { PARAMS_GROUP_MODEL, PARAMS_GROUP_KEY, PARAMS_GROUP_PROVIDER,
                    PARAMS_GROUP_HOUR, PARAMS_GROUP_DAY, PARAMS_GROUP_TEAM,
                    PARAMS_GROUP_END_USER, PARAMS_GROUP_TAG };

enum params_format { PARAMS_CSV, PARAMS_NDJSON };

/* One query-string parameter as the HTTP layer decoded it; value NULL: given without
 * "=". Both belong to the caller. */
struct params_pair {
	const char *name;
	const char *value;
};

/* A validated request. Strings point into the pairs' values (the caller keeps them).
 * Times are unix seconds: summary's are hour-aligned (day-aligned for a summary of end
 * users or tags, whose rollups are by day only), others' span 0..PARAMS_TIME_MAX+1 when
 * not given. */
struct params {
	int64_t from, to;
	enum params_group group;
	const char *key;          /* key name; NULL: not given */
	int has_key_id;           /* key_id given, or key resolved to an id by the caller */
	int64_t key_id;           /* 0: rows without a key */
	const char *team;         /* team name; NULL: not given */
	int has_team_id;          /* team_id given, or team resolved to an id by the caller */
	int64_t team_id;          /* 0: rows without a team */
	const char *end_user;     /* an end user's id, matched exactly; NULL: not given */
	const char *tag;          /* one tag (name=value, tags_tag_ok), matched whole; NULL:
	                           * not given */
	const char *model, *provider, *outcome;
	int errors_only;          /* outcome=error: anything but complete */
	int status_lo, status_hi; /* 0: no status filter */
	int stream;               /* -1: any */
	int limit;
	int has_before;
	int64_t before_ms, before_id;
	enum params_format format;
};

/* What was wrong: the parameter's name (possibly cut, for unknown ones) and why. */
struct params_error {
	char param[64];
	char msg[160];
};

/* Validates the pairs for an endpoint; now (unix seconds) sets default ranges.
 * Returns 0, or -1 with err filled: unknown or repeated parameters, empty or malformed
 * values and out-of-range numbers are all errors, and so is a summary whose team (a
 * team filter or group=team) meets a key, a model or provider: the team rollups have
 * neither; and one whose end user (an end_user filter or group=end_user) meets a team,
 * a model, a provider or an hour: end_user_daily has none of them; and the same of a
 * tag (a tag filter or group=tag: tag_daily, tag_total_daily), which meets no end
 * user either. */
int params_parse(struct params *p, enum params_endpoint ep, const struct params_pair *pairs,
                 size_t n, int64_t now, struct params_error *err);

/* Parses a cursor "started_at.id" (two non-negative decimal int64 without sign or
 * leading zeros). 0 or -1. */
int params_cursor_parse(const char *s, int64_t *started_ms, int64_t *id);

/* Writes the cursor of a row into buf (at least PARAMS_CURSOR_MAX bytes). */
void params_cursor_format(char *buf, size_t len, int64_t started_ms, int64_t id);

#endif
