/* params: query-parameter validation and the request cursor (see params.h). Pure; any
 * thread. One table lists every parameter, the endpoints taking it and its parser, so
 * that an unknown or misplaced parameter is refused by the same rule everywhere. */
#include "params.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tags.h"

#define EP(e) (1u << (e))
#define EP_FILTERS (EP(PARAMS_REQUESTS) | EP(PARAMS_EXPORT))

struct params_spec {
	const char *name;
	unsigned endpoints;
	int (*parse)(struct params *p, const char *v, struct params_error *err);
};

static int params_fail(struct params_error *err, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int params_fail(struct params_error *err, const char *param, const char *fmt, ...)
{
	va_list ap;

	snprintf(err->param, sizeof(err->param), "%s", param);
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* A non-negative decimal without sign, spaces or leading zeros, at most max. */
static int params_uint(const char *s, int64_t max, int64_t *out)
{
	int64_t v = 0;
	const char *c;

	if (!*s || (s[0] == '0' && s[1]))
		return -1;
	for (c = s; *c; c++) {
		if (*c < '0' || *c > '9' || v > (max - (*c - '0')) / 10)
			return -1;
		v = v * 10 + (*c - '0');
	}
	*out = v;
	return 0;
}

static int params_time(const char *v, const char *name, int64_t *out, struct params_error *err)
{
	if (params_uint(v, PARAMS_TIME_MAX, out) < 0)
		return params_fail(err, name, "%s must be unix seconds, an integer from 0 to %lld",
		                   name, (long long)PARAMS_TIME_MAX);
	return 0;
}

static int params_from(struct params *p, const char *v, struct params_error *err)
{
	return params_time(v, "from", &p->from, err);
}

static int params_to(struct params *p, const char *v, struct params_error *err)
{
	return params_time(v, "to", &p->to, err);
}

static int params_group(struct params *p, const char *v, struct params_error *err)
{
	static const char *const names[] = {
		[PARAMS_GROUP_MODEL] = "model", [PARAMS_GROUP_KEY] = "key",
		[PARAMS_GROUP_PROVIDER] = "provider", [PARAMS_GROUP_HOUR] = "hour",
		[PARAMS_GROUP_DAY] = "day", [PARAMS_GROUP_TEAM] = "team",
		[PARAMS_GROUP_END_USER] = "end_user", [PARAMS_GROUP_TAG] = "tag",
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(v, names[i]) == 0) {
			p->group = (enum params_group)i;
			return 0;
		}
	}
	return params_fail(err, "group", "group must be key, team, end_user, tag, model, "
	                   "provider, hour or day");
}

static int params_key(struct params *p, const char *v, struct params_error *err)
{
	(void)err;
	p->key = v;
	return 0;
}

static int params_key_id(struct params *p, const char *v, struct params_error *err)
{
	if (params_uint(v, INT64_MAX, &p->key_id) < 0)
		return params_fail(err, "key_id", "key_id must be a non-negative integer");
	p->has_key_id = 1;
	return 0;
}

static int params_team(struct params *p, const char *v, struct params_error *err)
{
	(void)err;
	p->team = v;
	return 0;
}

static int params_team_id(struct params *p, const char *v, struct params_error *err)
{
	if (params_uint(v, INT64_MAX, &p->team_id) < 0)
		return params_fail(err, "team_id", "team_id must be a non-negative integer");
	p->has_team_id = 1;
	return 0;
}

static int params_end_user(struct params *p, const char *v, struct params_error *err)
{
	(void)err;
	p->end_user = v;
	return 0;
}

static int params_tag(struct params *p, const char *v, struct params_error *err)
{
	if (!tags_tag_ok(v, strlen(v)))
		return params_fail(err, "tag", "tag must be one tag, name=value (a name of "
		                   "[a-z0-9_.-] starting with a letter, at most %d bytes; a value "
		                   "of [A-Za-z0-9_.:/@+-], at most %d bytes)", TAGS_NAME_MAX,
		                   TAGS_VALUE_MAX);
	p->tag = v;
	return 0;
}

static int params_model(struct params *p, const char *v, struct params_error *err)
{
	(void)err;
	p->model = v;
	return 0;
}

static int params_provider(struct params *p, const char *v, struct params_error *err)
{
	(void)err;
	p->provider = v;
	return 0;
}

/* "429" or a class "4xx" (any case of x). */
static int params_status(struct params *p, const char *v, struct params_error *err)
{
	int64_t code;

	if (strlen(v) == 3 && v[0] >= '1' && v[0] <= '5' && (v[1] | 0x20) == 'x' &&
	    (v[2] | 0x20) == 'x') {
		p->status_lo = (v[0] - '0') * 100;
		p->status_hi = p->status_lo + 99;
		return 0;
	}
	if (params_uint(v, 599, &code) < 0 || code < 100)
		return params_fail(err, "status", "status must be an HTTP status (100-599) or a "
		                   "class such as 4xx");
	p->status_lo = p->status_hi = (int)code;
	return 0;
}

static int params_outcome(struct params *p, const char *v, struct params_error *err)
{
	static const char *const outcomes[] = {
		"complete", "client_abort", "upstream_error", "upstream_rejected", "denied",
		"gateway_rejected", "no_record",
	};
	size_t i;

	if (strcmp(v, "error") == 0) {
		p->errors_only = 1;
		return 0;
	}
	for (i = 0; i < sizeof(outcomes) / sizeof(outcomes[0]); i++) {
		if (strcmp(v, outcomes[i]) == 0) {
			p->outcome = outcomes[i];
			return 0;
		}
	}
	return params_fail(err, "outcome", "outcome must be error or one of complete, "
	                   "client_abort, upstream_error, upstream_rejected, denied, "
	                   "gateway_rejected, no_record");
}

static int params_stream(struct params *p, const char *v, struct params_error *err)
{
	if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
		return params_fail(err, "stream", "stream must be 0 or 1");
	p->stream = v[0] - '0';
	return 0;
}

static int params_limit(struct params *p, const char *v, struct params_error *err)
{
	int64_t n;

	if (params_uint(v, PARAMS_LIMIT_MAX, &n) < 0 || n < 1)
		return params_fail(err, "limit", "limit must be an integer from 1 to %d",
		                   PARAMS_LIMIT_MAX);
	p->limit = (int)n;
	return 0;
}

static int params_before(struct params *p, const char *v, struct params_error *err)
{
	if (params_cursor_parse(v, &p->before_ms, &p->before_id) < 0)
		return params_fail(err, "before", "before must be the next cursor of a previous "
		                   "page (started_at.id)");
	p->has_before = 1;
	return 0;
}

static int params_format(struct params *p, const char *v, struct params_error *err)
{
	if (strcmp(v, "csv") == 0)
		p->format = PARAMS_CSV;
	else if (strcmp(v, "ndjson") == 0)
		p->format = PARAMS_NDJSON;
	else
		return params_fail(err, "format", "format must be csv or ndjson");
	return 0;
}

/* from, to and group come first: params_parse() checks seen[0], seen[1] and seen[2]. */
static const struct params_spec params_specs[] = {
	{ "from", EP(PARAMS_SUMMARY) | EP_FILTERS, params_from },
	{ "to", EP(PARAMS_SUMMARY) | EP_FILTERS, params_to },
	{ "group", EP(PARAMS_SUMMARY), params_group },
	{ "key", EP(PARAMS_SUMMARY) | EP_FILTERS, params_key },
	{ "key_id", EP_FILTERS, params_key_id },
	{ "team", EP(PARAMS_SUMMARY) | EP_FILTERS, params_team },
	{ "team_id", EP_FILTERS, params_team_id },
	{ "end_user", EP(PARAMS_SUMMARY) | EP_FILTERS, params_end_user },
	{ "tag", EP(PARAMS_SUMMARY) | EP_FILTERS, params_tag },
	{ "model", EP(PARAMS_SUMMARY) | EP_FILTERS, params_model },
	{ "provider", EP_FILTERS, params_provider },
	{ "status", EP_FILTERS, params_status },
	{ "outcome", EP_FILTERS, params_outcome },
	{ "stream", EP_FILTERS, params_stream },
	{ "limit", EP(PARAMS_SUMMARY) | EP(PARAMS_REQUESTS), params_limit },
	{ "before", EP(PARAMS_REQUESTS), params_before },
	{ "format", EP(PARAMS_EXPORT), params_format },
};

#define PARAMS_NSPECS (sizeof(params_specs) / sizeof(params_specs[0]))

/* A summary by team or of one team reads team_hourly and team_daily, which have no
 * key, model or provider: it takes only group=team, hour or day (team when not given)
 * and no key or model. */
static int params_team_summary(struct params *p, int have_group, struct params_error *err)
{
	if (p->team && !have_group)
		p->group = PARAMS_GROUP_TEAM;
	if (p->group != PARAMS_GROUP_TEAM && !p->team)
		return 0;
	if (p->key || p->model)
		return params_fail(err, p->key ? "key" : "model", "a summary by team or of a team "
		                   "takes no %s filter (the team rollups have none)",
		                   p->key ? "key" : "model");
	if (p->group == PARAMS_GROUP_KEY || p->group == PARAMS_GROUP_MODEL ||
	    p->group == PARAMS_GROUP_PROVIDER)
		return params_fail(err, "group", "a summary of a team groups by team, hour or day "
		                   "(the team rollups have no key, model or provider)");
	return 0;
}

/* A summary by end user or of one end user reads end_user_daily, which has a key and
 * an end user by day but no team, model, provider or hour: it takes only group=end_user,
 * key or day (end_user when not given), and no team or model filter. */
static int params_end_user_summary(struct params *p, int have_group, struct params_error *err)
{
	if (p->end_user && !have_group)
		p->group = PARAMS_GROUP_END_USER;
	if (p->group != PARAMS_GROUP_END_USER && !p->end_user)
		return 0;
	if (p->team || p->model)
		return params_fail(err, p->team ? "team" : "model", "a summary by end user or of an "
		                   "end user takes no %s filter (end_user_daily has none)",
		                   p->team ? "team" : "model");
	if (p->group != PARAMS_GROUP_END_USER && p->group != PARAMS_GROUP_KEY &&
	    p->group != PARAMS_GROUP_DAY)
		return params_fail(err, "group", "a summary of an end user groups by end_user, key "
		                   "or day (end_user_daily has no team, model, provider or hour)");
	return 0;
}

/* A summary by tag or of one tag reads tag_daily (a key and a tag by day) or
 * tag_total_daily (a tag by day), which have no team, end user, model, provider or
 * hour: it takes only group=tag, key or day (tag when not given), and no team, end user
 * or model filter. */
static int params_tag_summary(struct params *p, int have_group, struct params_error *err)
{
	const char *other = p->team ? "team" : p->end_user ? "end_user" : "model";

	if (p->tag && !have_group)
		p->group = PARAMS_GROUP_TAG;
	if (p->group != PARAMS_GROUP_TAG && !p->tag)
		return 0;
	if (p->team || p->end_user || p->model)
		return params_fail(err, other, "a summary by tag or of a tag takes no %s filter "
		                   "(tag_daily has none)", other);
	if (p->group != PARAMS_GROUP_TAG && p->group != PARAMS_GROUP_KEY &&
	    p->group != PARAMS_GROUP_DAY)
		return params_fail(err, "group", "a summary of a tag groups by tag, key or day "
		                   "(tag_daily has no team, end user, model, provider or hour)");
	return 0;
}

/* An unknown name is echoed back, so only a printable ASCII prefix of it. */
static int params_unknown(struct params_error *err, const char *name)
{
	size_t i;

	for (i = 0; name[i] && i < 40; i++)
		err->param[i] = name[i] >= 0x20 && name[i] < 0x7f ? name[i] : '?';
	err->param[i] = '\0';
	snprintf(err->msg, sizeof(err->msg), "unknown parameter");
	return -1;
}

/* Ranges: a summary defaults to the 24 hours up to the current hour's end and is
 * widened to whole hours, or to whole UTC days for end users and tags (end_user_daily
 * and the tag rollups have no hours; the answer's from and to say the days read); the row endpoints default to
 * everything, but an export must say. A given range must be ordered before any
 * widening. */
static int params_range(struct params *p, enum params_endpoint ep, int have_from, int have_to,
                        int64_t now, struct params_error *err)
{
	int64_t unit = p->group == PARAMS_GROUP_END_USER || p->end_user ||
	               p->group == PARAMS_GROUP_TAG || p->tag ? 86400 : 3600;

	if (ep == PARAMS_EXPORT && !have_from)
		return params_fail(err, "from", "from is required");
	if (ep == PARAMS_EXPORT && !have_to)
		return params_fail(err, "to", "to is required");
	if (have_from && have_to && p->from >= p->to)
		return params_fail(err, "to", "to must be after from");
	if (ep != PARAMS_SUMMARY) {
		if (!have_from)
			p->from = 0;
		if (!have_to)
			p->to = PARAMS_TIME_MAX + 1;
		if (p->from >= p->to)
			return params_fail(err, "to", "to must be after from");
		return 0;
	}
	if (!have_to)
		p->to = have_from ? p->from + 86400 : now;
	p->to += (unit - p->to % unit) % unit;
	if (!have_from)
		p->from = p->to >= 86400 ? p->to - 86400 : 0;
	p->from -= p->from % unit;
	if (p->from >= p->to)
		return params_fail(err, "to", "to must be after from");
	if (p->to - p->from > PARAMS_SUMMARY_MAX_DAYS * 86400LL)
		return params_fail(err, "to", "to - from must be at most %d days",
		                   PARAMS_SUMMARY_MAX_DAYS);
	return 0;
}

int params_parse(struct params *p, enum params_endpoint ep, const struct params_pair *pairs,
                 size_t n, int64_t now, struct params_error *err)
{
	unsigned char seen[PARAMS_NSPECS] = { 0 };
	size_t i, s;

	memset(p, 0, sizeof(*p));
	p->stream = -1;
	p->limit = PARAMS_LIMIT_DEFAULT;
	for (i = 0; i < n; i++) {
		const char *name = pairs[i].name, *value = pairs[i].value;

		for (s = 0; s < PARAMS_NSPECS; s++)
			if (strcmp(name, params_specs[s].name) == 0)
				break;
		if (s == PARAMS_NSPECS || !(params_specs[s].endpoints & EP(ep)))
			return params_unknown(err, name);
		if (seen[s]++)
			return params_fail(err, params_specs[s].name, "%s is given twice", name);
		if (!value || !*value)
			return params_fail(err, params_specs[s].name, "%s needs a value", name);
		if (params_specs[s].parse(p, value, err) < 0)
			return -1;
	}
	if (p->key && p->has_key_id)
		return params_fail(err, "key_id", "give key or key_id, not both");
	if (p->team && p->has_team_id)
		return params_fail(err, "team_id", "give team or team_id, not both");
	if (ep == PARAMS_SUMMARY && (params_tag_summary(p, seen[2] != 0, err) < 0 ||
	                             params_end_user_summary(p, seen[2] != 0, err) < 0 ||
	                             params_team_summary(p, seen[2] != 0, err) < 0))
		return -1;
	return params_range(p, ep, seen[0], seen[1], now, err);
}

int params_cursor_parse(const char *s, int64_t *started_ms, int64_t *id)
{
	char head[24];
	const char *dot = strchr(s, '.');
	size_t n;

	if (!dot || (n = (size_t)(dot - s)) >= sizeof(head))
		return -1;
	memcpy(head, s, n);
	head[n] = '\0';
	return params_uint(head, INT64_MAX, started_ms) < 0 ||
	       params_uint(dot + 1, INT64_MAX, id) < 0 ? -1 : 0;
}

void params_cursor_format(char *buf, size_t len, int64_t started_ms, int64_t id)
{
	snprintf(buf, len, "%lld.%lld", (long long)started_ms, (long long)id);
}
