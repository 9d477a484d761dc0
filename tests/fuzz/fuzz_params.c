/* libFuzzer target: queryd's query-parameter and cursor parsers (queryd/params.c) over
 * arbitrary bytes (peer input). The first byte picks the endpoint; the rest is split
 * like a decoded query string: pairs at '&', name and value at the first '=' (none:
 * a value-less parameter). A parse that succeeds must give values within the
 * documented bounds; a cursor that parses must print back to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "tags.h"

#define FUZZ_MAX_PAIRS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_assert(int cond)
{
	if (!cond)
		abort();
}

static void fuzz_check(const struct params *p, enum params_endpoint ep)
{
	fuzz_assert(p->from < p->to);
	fuzz_assert(p->limit >= 1 && p->limit <= PARAMS_LIMIT_MAX);
	fuzz_assert(p->stream >= -1 && p->stream <= 1);
	fuzz_assert(p->status_lo <= p->status_hi && p->status_hi < 600);
	if (ep == PARAMS_SUMMARY) {
		fuzz_assert(p->from % 3600 == 0 && p->to % 3600 == 0);
		fuzz_assert(p->to - p->from <= PARAMS_SUMMARY_MAX_DAYS * 86400LL);
		/* end_user_daily: whole days, no team, model or hour */
		if (p->group == PARAMS_GROUP_END_USER || p->end_user)
			fuzz_assert(p->from % 86400 == 0 && p->to % 86400 == 0 && !p->team &&
			            !p->model && (p->group == PARAMS_GROUP_END_USER ||
			                          p->group == PARAMS_GROUP_KEY ||
			                          p->group == PARAMS_GROUP_DAY));
		/* tag_daily: whole days, no team, end user, model or hour */
		if (p->group == PARAMS_GROUP_TAG || p->tag)
			fuzz_assert(p->from % 86400 == 0 && p->to % 86400 == 0 && !p->team &&
			            !p->end_user && !p->model && (p->group == PARAMS_GROUP_TAG ||
			                                          p->group == PARAMS_GROUP_KEY ||
			                                          p->group == PARAMS_GROUP_DAY));
	}
	if (p->tag)
		fuzz_assert(tags_tag_ok(p->tag, strlen(p->tag)));
	if (p->has_before)
		fuzz_assert(p->before_ms >= 0 && p->before_id >= 0);
}

static void fuzz_cursor(const char *s)
{
	char back[PARAMS_CURSOR_MAX];
	int64_t ms, id, ms2, id2;

	if (params_cursor_parse(s, &ms, &id) < 0)
		return;
	params_cursor_format(back, sizeof(back), ms, id);
	fuzz_assert(strcmp(back, s) == 0);
	fuzz_assert(params_cursor_parse(back, &ms2, &id2) == 0 && ms2 == ms && id2 == id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct params_pair pairs[FUZZ_MAX_PAIRS];
	struct params_error err;
	struct params p;
	enum params_endpoint ep;
	size_t n = 0;
	char *buf, *s, *amp, *eq;

	if (size == 0)
		return 0;
	ep = (enum params_endpoint)(data[0] % 4);
	buf = malloc(size);   /* the rest plus a NUL: ASan sees any overread */
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	fuzz_cursor(buf);
	for (s = buf; s && n < FUZZ_MAX_PAIRS; s = amp) {
		amp = strchr(s, '&');
		if (amp)
			*amp++ = '\0';
		eq = strchr(s, '=');
		if (eq)
			*eq++ = '\0';
		pairs[n].name = s;
		pairs[n].value = eq;
		n++;
	}
	if (params_parse(&p, ep, pairs, n, 1764806400, &err) == 0)
		fuzz_check(&p, ep);
	else
		fuzz_assert(err.param[0] != '\0' || err.msg[0] != '\0');
	free(buf);
	return 0;
}
