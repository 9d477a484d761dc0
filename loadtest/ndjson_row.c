/* ndjson_row: parses one --ndjson line of tally-gen into an acct_row (see ndjson_row.h).
 * Pure; any thread. */
#include "ndjson_row.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "acct.h"
#include "tags.h"

enum ndjson_kind {
	NDJSON_TEXT,      /* char[size] */
	NDJSON_END_USER,  /* char[size], an id the agent keeps (enduser_id_ok) */
	NDJSON_TAGS,      /* char[size], tags (tags_parse) kept as their canonical text */
	NDJSON_COUNT,     /* int64_t, 0..NDJSON_ROW_INT_MAX */
	NDJSON_STATUS,    /* int, 1..999 */
	NDJSON_FLAG,      /* int: true/false/0/1 */
	NDJSON_OUTCOME,   /* enum acct_outcome, by name */
	NDJSON_SOURCE,    /* enum acct_usage_source, by name */
};

struct ndjson_field {
	const char *name;
	enum ndjson_kind kind;
	size_t off, size;
	int required;
	int64_t absent;   /* value when missing or null (numbers and flags) */
};

#define NDJSON_FIELD(col, member, kind, req, absent) \
	{ col, kind, offsetof(struct acct_row, member), \
	  sizeof(((struct acct_row *)0)->member), req, absent }
#define NDJSON_TEXT_F(col)  NDJSON_FIELD(#col, col, NDJSON_TEXT, 0, 0)
#define NDJSON_COUNT_F(col) NDJSON_FIELD(#col, col, NDJSON_COUNT, 0, ACCT_NONE)

static const struct ndjson_field ndjson_fields[] = {
	NDJSON_FIELD("request_id", request_id, NDJSON_TEXT, 1, 0),
	NDJSON_COUNT_F(key_id),
	NDJSON_TEXT_F(model),
	NDJSON_TEXT_F(model_requested),
	NDJSON_TEXT_F(provider),
	NDJSON_TEXT_F(verdict),
	NDJSON_FIELD("status", status, NDJSON_STATUS, 0, 0),
	NDJSON_FIELD("stream", stream, NDJSON_FLAG, 0, ACCT_NONE),
	NDJSON_COUNT_F(prompt_tokens),
	NDJSON_COUNT_F(completion_tokens),
	NDJSON_COUNT_F(cached_tokens),
	NDJSON_COUNT_F(cache_creation_tokens),
	NDJSON_COUNT_F(reasoning_tokens),
	NDJSON_COUNT_F(cost_micros),
	NDJSON_FIELD("unpriced", unpriced, NDJSON_FLAG, 0, 0),
	NDJSON_FIELD("outcome", outcome, NDJSON_OUTCOME, 1, ACCT_COMPLETE),
	NDJSON_FIELD("usage_source", usage_source, NDJSON_SOURCE, 0, ACCT_USAGE_NONE),
	NDJSON_TEXT_F(termination),
	NDJSON_FIELD("started_at", started_at_ms, NDJSON_COUNT, 1, 0),
	NDJSON_COUNT_F(duration_ms),
	NDJSON_COUNT_F(ttfb_ms),
	NDJSON_COUNT_F(bytes_in),
	NDJSON_COUNT_F(bytes_out),
	NDJSON_COUNT_F(estimated_tokens),
	NDJSON_COUNT_F(estimated_cost_micros),
	NDJSON_COUNT_F(team_id),
	NDJSON_FIELD("end_user", end_user, NDJSON_END_USER, 0, 0),
	NDJSON_FIELD("tags", tags, NDJSON_TAGS, 0, 0),
};

#define NDJSON_NFIELDS (sizeof(ndjson_fields) / sizeof(ndjson_fields[0]))

/* A whole number in [min, max] into *v; 0, or -1 if v is not one. */
static int ndjson_int(const cJSON *v, int64_t min, int64_t max, int64_t *out)
{
	double d;

	if (!cJSON_IsNumber(v))
		return -1;
	d = v->valuedouble;
	/* The range test first: the cast of a double out of int64_t's range is undefined. */
	if (!(d >= (double)min && d <= (double)max) || (double)(int64_t)d != d)
		return -1;
	*out = (int64_t)d;
	return 0;
}

/* Index of name in the count names of f(i) (acct_outcome_name, ...), or -1. */
static int ndjson_name(const cJSON *v, int count, const char *(*f)(int))
{
	int i;

	if (!cJSON_IsString(v))
		return -1;
	for (i = 0; i < count; i++)
		if (strcmp(v->valuestring, f(i)) == 0)
			return i;
	return -1;
}

static const char *ndjson_outcome_name(int i)
{
	return acct_outcome_name((enum acct_outcome)i);
}

static const char *ndjson_source_name(int i)
{
	return acct_usage_source_name((enum acct_usage_source)i);
}

/* Stores v (non-null) as field f of row. 0, or -1 with the reason in err. */
static int ndjson_set(const struct ndjson_field *f, const cJSON *v, struct acct_row *row,
                      char *err, size_t errlen)
{
	char *p = (char *)row + f->off;
	int64_t n = 0;
	int i = 0;

	switch (f->kind) {
	case NDJSON_TEXT:
		if (!cJSON_IsString(v) || strlen(v->valuestring) >= f->size) {
			snprintf(err, errlen, "%s must be a string of at most %zu bytes", f->name,
			         f->size - 1);
			return -1;
		}
		memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
		return 0;
	case NDJSON_END_USER:
		if (!cJSON_IsString(v) || !enduser_id_ok(v->valuestring, strlen(v->valuestring))) {
			snprintf(err, errlen, "%s must be 1 to %d bytes of UTF-8 without control"
			         " characters", f->name, ACCT_END_USER_MAX - 1);
			return -1;
		}
		memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
		return 0;
	case NDJSON_TAGS: {
		struct tags t;
		enum tags_status st = cJSON_IsString(v)
			? tags_parse(v->valuestring, strlen(v->valuestring), &t) : TAGS_MALFORMED;

		if (st != TAGS_OK) {
			snprintf(err, errlen, "%s must be a list of tags, name=value: %s", f->name,
			         tags_status_text(st));
			return -1;
		}
		tags_format(&t, p, f->size);
		return 0;
	}
	case NDJSON_COUNT:
		if (ndjson_int(v, 0, NDJSON_ROW_INT_MAX, &n) < 0) {
			snprintf(err, errlen, "%s must be an integer from 0 to 2^53", f->name);
			return -1;
		}
		memcpy(p, &n, sizeof(n));
		return 0;
	case NDJSON_STATUS:
		if (ndjson_int(v, 1, 999, &n) < 0) {
			snprintf(err, errlen, "%s must be an integer from 1 to 999", f->name);
			return -1;
		}
		i = (int)n;
		break;
	case NDJSON_FLAG:
		if (cJSON_IsBool(v))
			i = cJSON_IsTrue(v);
		else if (ndjson_int(v, 0, 1, &n) == 0)
			i = (int)n;
		else {
			snprintf(err, errlen, "%s must be true, false, 0 or 1", f->name);
			return -1;
		}
		break;
	case NDJSON_OUTCOME:
	case NDJSON_SOURCE:
		i = f->kind == NDJSON_OUTCOME
			? ndjson_name(v, ACCT_OUTCOME_COUNT, ndjson_outcome_name)
			: ndjson_name(v, ACCT_USAGE_SOURCE_COUNT, ndjson_source_name);
		if (i < 0) {
			snprintf(err, errlen, "%s is not a known %s name", f->name, f->name);
			return -1;
		}
		break;
	}
	/* Everything but text and counts is an int or an enum (int-sized). */
	memcpy(p, &i, sizeof(i));
	return 0;
}

/* Sets field f of row to its value when not known. */
static void ndjson_absent(const struct ndjson_field *f, struct acct_row *row)
{
	char *p = (char *)row + f->off;
	int i = (int)f->absent;

	if (f->kind == NDJSON_TEXT || f->kind == NDJSON_END_USER || f->kind == NDJSON_TAGS)
		p[0] = '\0';
	else if (f->kind == NDJSON_COUNT)
		memcpy(p, &f->absent, sizeof(f->absent));
	else
		memcpy(p, &i, sizeof(i));
}

int ndjson_row_parse(const char *line, size_t len, struct acct_row *row, char *err,
                     size_t errlen)
{
	const char *end = NULL;
	cJSON *obj = cJSON_ParseWithLengthOpts(line, len, &end, 0);
	const cJSON *v;
	uint32_t seen = 0, known = 0;   /* bit i: ndjson_fields[i] given; given non-null */
	size_t i;
	int rc = -1;

	_Static_assert(NDJSON_NFIELDS <= 32, "the masks hold 32 fields");
	/* the bookkeeping fields no line names (est_*_tokens) stay ACCT_NONE */
	acct_row_init(row);
	if (!obj || !cJSON_IsObject(obj)) {
		snprintf(err, errlen, "not a JSON object");
		goto out;
	}
	for (; end < line + len; end++)
		if (!*end || !strchr(" \t\r\n", *end)) {
			snprintf(err, errlen, "text after the JSON object");
			goto out;
		}
	cJSON_ArrayForEach(v, obj) {
		for (i = 0; i < NDJSON_NFIELDS; i++)
			if (strcmp(v->string, ndjson_fields[i].name) == 0)
				break;
		if (i == NDJSON_NFIELDS) {
			snprintf(err, errlen, "unknown key \"%.64s\"", v->string);
			goto out;
		}
		if (seen & (1u << i)) {
			snprintf(err, errlen, "%s given twice", ndjson_fields[i].name);
			goto out;
		}
		seen |= 1u << i;
		if (cJSON_IsNull(v))
			continue;
		if (ndjson_set(&ndjson_fields[i], v, row, err, errlen) < 0)
			goto out;
		known |= 1u << i;
	}
	for (i = 0; i < NDJSON_NFIELDS; i++) {
		if (known & (1u << i))
			continue;
		if (ndjson_fields[i].required) {
			snprintf(err, errlen, "%s is required", ndjson_fields[i].name);
			goto out;
		}
		ndjson_absent(&ndjson_fields[i], row);
	}
	if (!row->request_id[0]) {
		snprintf(err, errlen, "request_id must not be empty");
		goto out;
	}
	/* as the agent stores them: a cost only for an estimate of some tokens */
	if (row->estimated_cost_micros != ACCT_NONE && row->estimated_tokens == ACCT_NONE) {
		snprintf(err, errlen, "estimated_cost_micros needs estimated_tokens");
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(obj);
	return rc;
}
