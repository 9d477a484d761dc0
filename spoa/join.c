/* join: decision + record -> row, the accounting join (see join.h). Pure but for
 * join_count, which counts a fate; the I/O threads build pending rows with it, the
 * intake thread the rows it queues. */
#include "join.h"

#include <string.h>

#include "acct.h"
#include "counters.h"
#include "keytable.h"
#include "price.h"
#include "usage.h"

/* Copies len bytes of s into a fixed field, cut to fit, NUL-terminated. */
static void join_copy(char *dst, size_t cap, const char *s, size_t len)
{
	size_t n = len < cap - 1 ? len : cap - 1;

	memcpy(dst, s, n);
	dst[n] = '\0';
}

#define JOIN_COPY(dst, s, len) join_copy(dst, sizeof(dst), s, len)
#define JOIN_COPY_STR(dst, s) join_copy(dst, sizeof(dst), s, strlen(s))

void join_decided(const struct decision *d, const char *id, size_t idlen, int64_t now_ms,
                  struct acct_row *row)
{
	const char *verdict = decision_verdict_name(d->verdict);

	acct_row_init(row);
	JOIN_COPY(row->request_id, id, idlen);
	row->key_id = d->key ? d->key->id : ACCT_NONE;
	row->team_id = d->key && d->key->team ? d->key->team->id : ACCT_NONE;
	if (d->model) {
		JOIN_COPY_STR(row->model_requested, d->model->name);
		JOIN_COPY_STR(row->model, d->model->name);
		if (d->model->provider)
			JOIN_COPY_STR(row->provider, d->model->provider->name);
	} else if (d->body.has_model && !d->body.model_unusable) {
		/* A model the gateway does not know: the operator sees what the client asked. */
		JOIN_COPY_STR(row->model_requested, d->body.model);
	}
	JOIN_COPY_STR(row->verdict, verdict);
	JOIN_COPY_STR(row->end_user, d->end_user);
	JOIN_COPY_STR(row->tags, d->tags);
	row->stream = d->stream < 0 ? ACCT_NONE : d->stream;
	row->status = decision_http_status(d->verdict);
	row->started_at_ms = now_ms;
	memcpy(row->holds, d->holds, sizeof(row->holds));
	if (d->verdict == DECISION_ALLOW) {
		row->est_prompt_tokens = d->est_prompt_tokens;
		row->est_completion_tokens = d->est_completion_tokens;
		/* A tier asked for by name prices the row unless the answer names its own. */
		if (strcmp(price_tier_name(d->body.service_tier), PRICE_TIER_DEFAULT) != 0)
			JOIN_COPY_STR(row->service_tier, d->body.service_tier);
	}
	row->flags = (d->unbilled ? ACCT_FLAG_UNBILLED : 0) |
	             (d->creates_response && d->verdict == DECISION_ALLOW
	                  ? ACCT_FLAG_CREATES_RESPONSE : 0) |
	             (d->wait ? ACCT_FLAG_WAITING : 0) |
	             (d->amend_scan && d->verdict == DECISION_ALLOW ? ACCT_FLAG_SCANNED : 0);
}

/* The row's prices: a dated snapshot of the routed model (join_model) by its own card
 * when one is configured, else by the routed model's. */
static const struct price_sheet *join_prices(const struct keytable *kt,
                                             const struct acct_row *row)
{
	const struct kt_model *m = keytable_find_model(kt, row->model, strlen(row->model));

	if (!m || !m->prices.ncards)
		m = keytable_find_model(kt, row->model_requested, strlen(row->model_requested));
	return m ? &m->prices : NULL;
}

/* A row no pending decision made (its record names the key, after a restart without
 * a journal, say): its key's team and fixed tags now, the best guess of those it was
 * decided under, so that the team's and the tags' rollups and budgets count it (a
 * budgeted tag is always a fixed one). */
static void join_team_of_key(const struct keytable *kt, struct acct_row *row)
{
	const struct kt_key *k = kt && row->key_id > 0 ? keytable_key_of_id(kt, row->key_id) : NULL;

	if (k && k->team)
		row->team_id = k->team->id;
	if (k && k->fixed_tags && !k->fixed_tags_over)
		tags_format(k->fixed_tags, row->tags, sizeof(row->tags));
}

/* What the agent decided, as HAProxy wrote it into a record no pending row matches. A
 * record without id was never judged: whatever it says of a decision is ignored. */
static void join_decision_of_record(const struct record *r, struct acct_row *row)
{
	if (!r->id.len)
		return;
	if (r->verdict.len)
		JOIN_COPY(row->verdict, r->verdict.ptr, r->verdict.len);
	else if (r->skipped)
		JOIN_COPY_STR(row->verdict, "fail_open");
	row->key_id = r->key_id;
	JOIN_COPY_STR(row->model_requested, r->model);
	JOIN_COPY_STR(row->provider, r->provider);
	row->stream = r->stream != ACCT_NONE ? (int)r->stream : ACCT_NONE;
}

/* Whether HAProxy refused, after the decision allowed it, a cut body the capture filter
 * spoiled past the cut (haproxy/capture.lua, tally.cfg's tally_spoiled): then its
 * record names the refusal, one of those the agent gives a whole body. No other record
 * changes a decision. */
static int join_refused_after_decision(const struct acct_row *pending, const struct record *r)
{
	static const enum decision_verdict past_cut[] = {
		DECISION_BAD_BODY, DECISION_COST_POLICY, DECISION_STORED_STATE,
		DECISION_MODEL_FORBIDDEN, DECISION_MODEL_REQUIRED,
	};
	size_t i;

	if (!(pending->flags & ACCT_FLAG_SCANNED))
		return 0;
	for (i = 0; i < sizeof(past_cut) / sizeof(past_cut[0]); i++) {
		const char *name = decision_verdict_name(past_cut[i]);

		if (r->verdict.len == strlen(name) && memcmp(r->verdict.ptr, name, r->verdict.len) == 0)
			return 1;
	}
	return 0;
}

/* Whether s (n bytes) is a date: YYYY-MM-DD with dashes, else YYYYMMDD. */
static int join_is_date(const char *s, size_t n, int dashes)
{
	static const char dashed[] = "dddd-dd-dd";
	const char *shape = dashes ? dashed : "dddddddd";
	int month, day;
	size_t i;

	if (n != strlen(shape))
		return 0;
	for (i = 0; i < n; i++)
		if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
			return 0;
	s += 4 + dashes;
	month = (s[0] - '0') * 10 + (s[1] - '0');
	s += 2 + dashes;
	day = (s[0] - '0') * 10 + (s[1] - '0');
	return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

/* Whether reported is base (n bytes) followed by "-" and a date of either form. */
static int join_is_dated(const char *base, size_t n, const char *reported)
{
	size_t len = strlen(reported);

	if (len <= n + 1 || memcmp(reported, base, n) != 0 || reported[n] != '-')
		return 0;
	return join_is_date(reported + n + 1, len - n - 1, 1) ||
	       join_is_date(reported + n + 1, len - n - 1, 0);
}

enum join_model_match join_model_match(const char *routed, const char *reported)
{
	static const char alias[] = "-latest";
	size_t n = strlen(routed), a = sizeof(alias) - 1;

	if (strcmp(routed, reported) == 0)
		return JOIN_MODEL_SAME;
	if (n && (join_is_dated(routed, n, reported) ||
	          (n > a && strcmp(routed + n - a, alias) == 0 &&
	           join_is_dated(routed, n - a, reported))))
		return JOIN_MODEL_SNAPSHOT;
	return JOIN_MODEL_OTHER;
}

/* The row's model from the name the answer gave (reported, "" none): see join_record. */
static void join_model(struct acct_row *row, const char *reported)
{
	row->model_reported[0] = '\0';
	if (!row->model_requested[0]) {
		if (reported[0])
			JOIN_COPY_STR(row->model, reported);
		return;
	}
	if (reported[0] && join_model_match(row->model_requested, reported) != JOIN_MODEL_OTHER) {
		JOIN_COPY_STR(row->model, reported);
		return;
	}
	JOIN_COPY_STR(row->model, row->model_requested);
	if (reported[0])
		JOIN_COPY_STR(row->model_reported, reported);
}

/* Whether the gateway answered the request itself (a model list, a key's usage): no
 * upstream saw it, there is nothing to bill. */
static int join_answered_by_gateway(const struct acct_row *row)
{
	return strcmp(row->verdict, decision_verdict_name(DECISION_MODELS_LISTED)) == 0 ||
	       strcmp(row->verdict, decision_verdict_name(DECISION_USAGE_REPORTED)) == 0;
}

/* How the transaction ended: a denial as the agent decided it, nothing decided as
 * HAProxy's own refusal, else from what HAProxy sent the client and whether the
 * answer's terminal event passed (ended). */
static enum acct_outcome join_outcome(const struct acct_row *row, const struct record *r,
                                      int ended)
{
	/* HAProxy's own answer ends "L" (local), which no upstream outcome describes. */
	if (join_answered_by_gateway(row))
		return row->status >= 200 && row->status < 300 ? ACCT_COMPLETE : ACCT_GATEWAY_REJECTED;
	if (row->verdict[0] && strcmp(row->verdict, "allow") != 0 &&
	    strcmp(row->verdict, "fail_open") != 0)
		return ACCT_DENIED;
	/* No verdict, or one HAProxy never saw (it gave up waiting, and did not fail open):
	 * HAProxy answered alone. */
	if (!row->verdict[0] || (!r->verdict.len && !r->skipped))
		return ACCT_GATEWAY_REJECTED;
	return acct_outcome_of(row->status, row->termination, ended);
}

/* The id of the response a Responses create stored upstream, which then belongs to the
 * row's key: only from a 2xx answer to an admitted request, from json_query's field or
 * the captured answer's summary. */
static void join_response_id(const struct record *r, struct acct_row *row)
{
	row->response_id[0] = '\0';
	if (row->status < 200 || row->status > 299 || row->key_id < 0 ||
	    strcmp(row->verdict, "allow") != 0)
		return;
	if (r->u_id.len) {
		if (acct_response_id_ok(r->u_id.ptr, r->u_id.len))
			JOIN_COPY(row->response_id, r->u_id.ptr, r->u_id.len);
	} else if (r->has_capture) {
		usage_response_id(r->summary.ptr, r->summary.len, r->cap_kind == 's',
		                  row->response_id, sizeof(row->response_id));
	}
}

/* The usage a capture kept, with the web searches the capture filter counted in an
 * OpenAI answer (haproxy/capture.lua), where the usage has none. */
static void join_usage_of_capture(const struct record *r, struct usage *u)
{
	usage_from_capture(r->summary.ptr, r->summary.len, r->cap_kind == 's', u);
	if (u->web_search_calls == ACCT_NONE && u->source != ACCT_USAGE_NONE)
		u->web_search_calls = r->u[RECORD_U_WEB_SEARCH];
}

void join_record(const struct record *r, const char *id, const struct acct_row *pending,
                 const struct keytable *kt, int64_t default_max_tokens, struct acct_row *row)
{
	const struct price_sheet *prices;
	struct usage u;

	if (pending) {
		*row = *pending;
		if (join_refused_after_decision(pending, r))
			JOIN_COPY(row->verdict, r->verdict.ptr, r->verdict.len);
	} else {
		acct_row_init(row);
		JOIN_COPY_STR(row->request_id, id);
		join_decision_of_record(r, row);
		join_team_of_key(kt, row);
	}
	row->status = (int)r->status;
	JOIN_COPY(row->termination, r->termination.ptr, r->termination.len);
	row->started_at_ms = r->accept_s * 1000 + r->accept_ms;
	row->bytes_in = r->bytes_in;
	row->bytes_out = r->bytes_out;
	row->duration_ms = r->ta >= 0 ? r->ta : ACCT_NONE;
	row->ttfb_ms = r->tw >= 0 && r->tc >= 0 && r->tr_server >= 0
	               ? r->tw + r->tc + r->tr_server : ACCT_NONE;
	/* A body cut before its stream flag: the answer says what it was. */
	if (row->stream == ACCT_NONE && r->has_capture && r->cap_kind != 'o')
		row->stream = r->cap_kind == 's';

	/* A record without id never reached an upstream: it reports nothing. (Its nonce's
	 * MAC vouches for HAProxy's hand, not for these fields, and that MAC rides on every
	 * record of its connection.) */
	if (!r->id.len || (row->flags & ACCT_FLAG_UNBILLED))
		usage_none(&u);
	else if (r->has_capture)
		join_usage_of_capture(r, &u);
	else
		usage_from_fields(r, &u);
	row->prompt_tokens = u.prompt_tokens;
	row->completion_tokens = u.completion_tokens;
	row->cached_tokens = u.cached_tokens;
	row->cache_creation_tokens = u.cache_creation_tokens;
	row->reasoning_tokens = u.reasoning_tokens;
	row->cache_creation_1h_tokens = u.cache_creation_1h_tokens;
	row->audio_input_tokens = u.audio_input_tokens;
	row->audio_output_tokens = u.audio_output_tokens;
	row->accepted_prediction_tokens = u.accepted_prediction_tokens;
	row->rejected_prediction_tokens = u.rejected_prediction_tokens;
	row->web_search_calls = u.web_search_calls;
	/* The tier the answer was served at; else the one the request asked for stays. */
	if (u.service_tier[0])
		JOIN_COPY_STR(row->service_tier, u.service_tier);
	row->usage_source = u.source;
	join_model(row, u.model);
	row->outcome = join_outcome(row, r, u.ended);
	if (row->flags & ACCT_FLAG_CREATES_RESPONSE)
		join_response_id(r, row);

	if (join_answered_by_gateway(row))
		row->est_prompt_tokens = row->est_completion_tokens = 0;
	/* No decision saw the body (fail-open, a lost pending row): the bytes HAProxy read
	 * bound the prompt from above, the agent's default the completion. */
	if (row->est_prompt_tokens == ACCT_NONE && r->bytes_in >= 0)
		row->est_prompt_tokens = (r->bytes_in + 3) / 4;
	if (row->est_completion_tokens == ACCT_NONE)
		row->est_completion_tokens = default_max_tokens;
	prices = join_prices(kt, row);
	acct_price(row, prices);
	acct_estimate(row, prices);
}

void join_expired(const struct acct_row *pending, const struct keytable *kt,
                  struct acct_row *row)
{
	*row = *pending;
	row->outcome = ACCT_NO_RECORD;
	row->usage_source = ACCT_USAGE_NONE;
	acct_estimate(row, join_prices(kt, row));
}

enum join_fate join_record_fate(int seen, int admitted)
{
	if (seen)
		return JOIN_REPEAT;
	return admitted ? JOIN_RESOLVES : JOIN_OWED;
}

enum join_fate join_decision_fate(int added, const struct acct_row *replaced)
{
	if (added == 1 && replaced && (replaced->flags & ACCT_FLAG_WAITING))
		return JOIN_RESOLVES;
	return added == 0 ? JOIN_OWED : JOIN_REPEAT;
}

int join_record_ends_wait(int admitted, int64_t spoe_error)
{
	return !admitted && spoe_error > 0;
}

enum join_fate join_expiry_fate(int seen)
{
	return seen ? JOIN_RECOUNTED : JOIN_RESOLVES;
}

void join_count(enum join_fate f)
{
	switch (f) {
	case JOIN_OWED:
		counters_receive();
		break;
	case JOIN_REPEAT:
		counters_repeat();
		break;
	case JOIN_RECOUNTED:
		counters_settle(&(struct counters){ .duplicates = 1 });
		break;
	case JOIN_RESOLVES:
		break;
	}
}

void join_charge(const struct acct_row *row, int64_t *tokens, int64_t *cost_micros)
{
	int64_t t = ACCT_NONE, c = ACCT_NONE;

	if (row->prompt_tokens >= 0 || row->completion_tokens >= 0 || row->estimated_tokens >= 0)
		t = (row->prompt_tokens > 0 ? row->prompt_tokens : 0) +
		    (row->completion_tokens > 0 ? row->completion_tokens : 0) +
		    (row->estimated_tokens > 0 ? row->estimated_tokens : 0);
	if (row->cost_micros >= 0 || row->estimated_cost_micros >= 0)
		c = (row->cost_micros > 0 ? row->cost_micros : 0) +
		    (row->estimated_cost_micros > 0 ? row->estimated_cost_micros : 0);
	*tokens = t;
	*cost_micros = c;
}
