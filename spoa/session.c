/* session: SPOP state machine for one connection (runs on the connection's I/O thread).
 *
 * Every NOTIFY gets an ACK at once, even one whose messages cannot be read: that one
 * carries an explicit error verdict, because no verdict at all would look like an
 * unreachable agent and, under fail-open, let the request through unjudged. */
#include "session.h"

#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "counters.h"
#include "decision.h"
#include "keytable.h"
#include "log.h"
#include "longbody.h"
#include "owner.h"
#include "spop.h"
#include "stats.h"
#include "txnvar.h"
#include "usageview.h"
#include "wording.h"

#define SESSION_CAPABILITIES "pipelining"

void session_init(struct session *s, uint32_t max_frame_size)
{
	memset(s, 0, sizeof(*s));
	s->state = SESSION_WAIT_HELLO;
	s->max_frame_size = max_frame_size;
}

static enum session_result session_fail(struct session *s, struct spop_writer *out,
                                        enum spop_status status)
{
	log_warn("spop: closing connection: %s", spop_status_str(status));
	spop_agent_disconnect_encode(out, status, spop_status_str(status));
	s->state = SESSION_CLOSED;
	return SESSION_CLOSE;
}

static enum session_result session_hello(struct session *s, const struct spop_frame *f,
                                         struct spop_writer *out)
{
	struct spop_hello h;
	enum spop_status err;

	if (spop_hello_parse(f, &h, &err) < 0)
		return session_fail(s, out, err);
	if (h.max_frame_size && h.max_frame_size < s->max_frame_size)
		s->max_frame_size = h.max_frame_size;
	else if (h.max_frame_size > s->max_frame_size && !h.healthcheck)
		log_warn("spop: HAProxy offers %u-byte frames, this agent accepts %u: requests whose"
		         " details need more get no verdict; raise --max-frame-size",
		         (unsigned)h.max_frame_size, (unsigned)s->max_frame_size);
	if (spop_agent_hello_encode(out, s->max_frame_size, SESSION_CAPABILITIES) < 0)
		return session_fail(s, out, SPOP_ERR_RES);
	/* A health check ends with our HELLO: HAProxy closes once it has read it. */
	if (h.healthcheck) {
		s->state = SESSION_CLOSED;
		return SESSION_CLOSE;
	}
	s->state = SESSION_READY;
	return SESSION_CONTINUE;
}

static int session_arg_int(const struct spop_data *v, int64_t *out)
{
	switch (v->type) {
	case SPOP_DATA_INT32: *out = v->u.i32; return 0;
	case SPOP_DATA_UINT32: *out = v->u.u32; return 0;
	case SPOP_DATA_INT64: *out = v->u.i64; return 0;
	case SPOP_DATA_UINT64: *out = v->u.u64 > INT64_MAX ? INT64_MAX : (int64_t)v->u.u64; return 0;
	default: return -1;
	}
}

static int session_key_is(struct spop_str k, const char *name)
{
	return k.len == strlen(name) && memcmp(k.ptr, name, k.len) == 0;
}

/* Monotonic milliseconds, for the lifetime of long bodies in assembly. */
static int64_t session_now_ms(void)
{
	return (int64_t)(stats_now_ns() / 1000000);
}

/* A piece of a long body (SESSION_PIECE_MESSAGE): where it starts, and its bytes. */
struct session_piece {
	int64_t off;
	struct spop_str data;
};

/* Reads our messages' arguments into req (and piece, for a piece's message; else NULL).
 * Unknown arguments are ignored so that a newer SPOE file can add some; absent or NULL
 * ones stay empty. */
static int session_read_request(const struct spop_msg *m, struct decision_request *req,
                                struct spop_str *id, struct session_piece *piece)
{
	const unsigned char *p = m->args;
	struct spop_str key;
	struct spop_data v;
	int64_t body_size = -1, cl_count = 0, json_max = 0, off = -1;
	int have_method = 0;
	int rc;

	memset(req, 0, sizeof(*req));
	while ((rc = spop_kv_next(&p, m->args_end, &key, &v)) == 1) {
		int is_text = v.type == SPOP_DATA_STR || v.type == SPOP_DATA_BIN;
		int64_t *num = session_key_is(key, "bsize") ? &body_size
		             : session_key_is(key, "cl")    ? &cl_count
		             : session_key_is(key, "jmax")  ? &json_max
		             : session_key_is(key, "off")   ? &off
		             : session_key_is(key, "eun")   ? &req->end_user_headers
		             : session_key_is(key, "tgn")   ? &req->tags_headers : NULL;

		if (num) {
			if (session_arg_int(&v, num) < 0 && v.type != SPOP_DATA_NULL)
				return -1;
			continue;
		}
		if (!is_text)
			continue;
		if (session_key_is(key, "auth"))
			req->authorization = v.u.str;
		else if (session_key_is(key, "xkey"))
			req->api_key = v.u.str;
		else if (session_key_is(key, "av"))
			req->anthropic_version = v.u.str;
		else if (session_key_is(key, "eu"))
			req->end_user = v.u.str;
		else if (session_key_is(key, "tg"))
			req->tags = v.u.str;
		else if (session_key_is(key, "q"))
			req->query = v.u.str;
		else if (session_key_is(key, "method")) {
			req->method = v.u.str;
			have_method = 1;
		}
		else if (session_key_is(key, "path"))
			req->path = v.u.str;
		else if (session_key_is(key, piece ? "data" : "body"))
			req->body = v.u.str;
		else if (session_key_is(key, "secret"))
			req->secret = v.u.str;
		else if (session_key_is(key, "id"))
			*id = v.u.str;
	}
	if (piece) {
		piece->off = off;
		piece->data = req->body;
		req->body_size = body_size;
		req->json_max = json_max;
		return rc < 0 || off < 0 || body_size <= 0 ? -1 : 0;
	}
	/* Without the method the SPOE file is not ours (an old one, say): an error names
	 * that better than a verdict on the wrong grounds would. */
	if (rc < 0 || !have_method)
		return -1;
	/* HAProxy rejects requests with conflicting Content-Lengths, so one or more
	 * headers all mean the same length. */
	req->body_length_known = cl_count > 0;
	/* HAProxy hands us at most the buffered, capped prefix of the body; a size we were
	 * not told counts as larger than what we got. */
	req->body_truncated = body_size < 0 || body_size > (int64_t)req->body.len;
	req->body_size = body_size;
	req->json_max = json_max;
	return 0;
}

/* The variables' names (txnvar.h), which the ACK sets under SPOE's var-prefix. */
static const char *const session_var_names[TXNVAR_COUNT] = {
#define SESSION_VAR_NAME(id, name, writers, readers, what) name,
	TXNVAR_TABLE(SESSION_VAR_NAME)
#undef SESSION_VAR_NAME
};

static void session_set_var(struct spop_writer *out, enum txnvar var, const struct spop_data *v)
{
	const char *name = session_var_names[var];

	spop_put_set_var(out, SPOP_SCOPE_TXN, name, strlen(name), v);
}

static void session_set_str(struct spop_writer *out, enum txnvar var, const char *s, size_t len)
{
	struct spop_data v = { .type = SPOP_DATA_STR };

	v.u.str.ptr = s;
	v.u.str.len = len;
	session_set_var(out, var, &v);
}

static void session_set_int(struct spop_writer *out, enum txnvar var, int64_t n)
{
	struct spop_data v = { .type = SPOP_DATA_INT64 };

	v.u.i64 = n;
	session_set_var(out, var, &v);
}

/* A unary answer's prices, for HAProxy to work out its cost when the operator asks for
 * it in a response header (tally.cfg, TALLY_COST_HEADER). HAProxy's formula knows
 * input, cached, cache-write and output tokens: a model with more to its prices (another
 * card, reasoning or hour-long cache writes priced apart) sends none, and HAProxy leaves
 * out the header whenever the answer reports a class or tier the formula lacks. An unset
 * price goes as PRICE_UNSET (negative): a count it would price leaves the answer without
 * the header, as its row is unpriced. */
static void session_put_prices(struct spop_writer *out, const struct price_sheet *s)
{
	const struct price_card *c = s->cards;

	if (s->ncards != 1 || strcmp(c->tier, PRICE_TIER_DEFAULT) != 0 || c->above_tokens ||
	    c->micros[PRICE_REASONING] != PRICE_UNSET || c->micros[PRICE_CACHE_WRITE_1H] != PRICE_UNSET)
		return;
	session_set_int(out, TXNVAR_PRICE_INPUT, c->micros[PRICE_INPUT]);
	session_set_int(out, TXNVAR_PRICE_OUTPUT, c->micros[PRICE_OUTPUT]);
	session_set_int(out, TXNVAR_PRICE_CACHED, c->micros[PRICE_CACHED]);
	session_set_int(out, TXNVAR_PRICE_CACHE_WRITE, c->micros[PRICE_CACHE_WRITE]);
}

/* A figure of the key's standing; negative is "no such limit" and is left out. */
static void session_set_figure(struct spop_writer *out, enum txnvar var, int64_t v)
{
	if (v >= 0)
		session_set_int(out, var, v);
}

/* Where the key stands, for the x-ratelimit-* headers and Retry-After. */
static void session_put_quota(struct spop_writer *out, const struct decision *d)
{
	const struct quota_status *st = &d->quota;

	session_set_figure(out, TXNVAR_LIMIT_REQUESTS, st->limit_requests);
	session_set_figure(out, TXNVAR_REMAINING_REQUESTS, st->remaining_requests);
	session_set_figure(out, TXNVAR_RESET_REQUESTS_MS, st->reset_requests_ms);
	session_set_figure(out, TXNVAR_LIMIT_TOKENS, st->limit_tokens);
	session_set_figure(out, TXNVAR_REMAINING_TOKENS, st->remaining_tokens);
	session_set_figure(out, TXNVAR_RESET_TOKENS_MS, st->reset_tokens_ms);
	if (d->verdict != DECISION_ALLOW && st->retry_after_s > 0)
		session_set_int(out, TXNVAR_RETRY_AFTER, st->retry_after_s);
}

static void session_put_verdict(struct spop_writer *out, const struct decision *d, int brief)
{
	const char *name = decision_verdict_name(d->verdict);

	session_set_str(out, TXNVAR_VERDICT, name, strlen(name));
	session_set_int(out, TXNVAR_STATUS, decision_http_status(d->verdict));
	if (brief)
		return;
	if (d->key) {
		session_set_int(out, TXNVAR_KEY_ID, d->key->id);
		session_set_str(out, TXNVAR_KEY_NAME, d->key->name, strlen(d->key->name));
	}
	if (d->model) {
		session_set_str(out, TXNVAR_MODEL, d->model->name, strlen(d->model->name));
		if (d->model->provider)
			session_set_str(out, TXNVAR_PROVIDER, d->model->provider->name,
			                strlen(d->model->provider->name));
		if (d->verdict == DECISION_ALLOW)
			session_set_str(out, TXNVAR_BACKEND, d->model->provider->backend,
			                strlen(d->model->provider->backend));
	}
	if (d->capture)
		session_set_int(out, TXNVAR_CAPTURE, 1);
	else if (d->verdict == DECISION_ALLOW && d->model)
		session_put_prices(out, &d->model->prices);
	if (d->count_searches && d->verdict == DECISION_ALLOW)
		session_set_int(out, TXNVAR_COUNT_SEARCHES, 1);
	if (d->amend_scan)
		session_set_int(out, TXNVAR_SCAN_AMEND, 1);
	if (d->stateless_scan)
		session_set_int(out, TXNVAR_SCAN_STATELESS, 1);
	if (d->verdict == DECISION_ALLOW && d->costly_scan[0])
		session_set_str(out, TXNVAR_SCAN_COSTLY, d->costly_scan, strlen(d->costly_scan));
	if (d->verdict == DECISION_ALLOW && d->tiers_scan[0])
		session_set_str(out, TXNVAR_SCAN_TIERS, d->tiers_scan, strlen(d->tiers_scan));
	/* Nothing in the answer is billed: HAProxy leaves its usage unread. */
	if (d->unbilled && d->verdict == DECISION_ALLOW)
		session_set_int(out, TXNVAR_UNBILLED, 1);
	/* On a stored response's path, 1 asks HAProxy to decide again a little later, 2
	 * ends its asking (tally.cfg). */
	if (d->response_id[0])
		session_set_int(out, TXNVAR_STORED_WAIT, d->wait ? 1 : 2);
	if (d->allow_scan && d->verdict == DECISION_ALLOW) {
		char allow[DECISION_ALLOW_LIST_MAX];
		size_t n = decision_scan_list(d, allow, sizeof(allow));

		session_set_str(out, TXNVAR_SCAN_ALLOW, allow, n < sizeof(allow) ? n : 0);
	}
	if (d->amend_text) {
		long len = (long)strlen(d->amend_text);

		session_set_str(out, TXNVAR_AMEND_TEXT, d->amend_text, (size_t)len);
		/* The body's new length: HAProxy rewrites Content-Length by this much. */
		session_set_int(out, TXNVAR_AMEND_DELTA, len - d->amend_cut);
		if (!d->amend_scan)
			session_set_int(out, TXNVAR_AMEND_AT, d->amend_at);
		if (d->amend_cut > 0)
			session_set_int(out, TXNVAR_AMEND_CUT, d->amend_cut);
	}
	if (d->model_source == DECISION_MODEL_KEY_DEFAULT)
		session_set_str(out, TXNVAR_MODEL_SOURCE, "key_default", strlen("key_default"));
	if (d->stream >= 0)
		session_set_int(out, TXNVAR_STREAM, d->stream);
	if (d->body_truncated)
		session_set_int(out, TXNVAR_BODY_TRUNCATED, 1);
	if (d->has_quota)
		session_put_quota(out, d);
}

/* The unique id, for debug logs: printed only when it looks like the UUID HAProxy makes,
 * so that a peer cannot put control bytes into the log. */
static int session_id_printable(struct spop_str id)
{
	size_t i;

	if (id.len == 0 || id.len > 64)
		return 0;
	for (i = 0; i < id.len; i++)
		if (!strchr("0123456789abcdefABCDEF-", id.ptr[i]))
			return 0;
	return 1;
}

/* Writes one ACK frame with the verdict; -1 if it does not fit max_frame (the frame is
 * then dropped from out). */
static int session_ack(struct session *s, const struct spop_frame *f, const struct decision *d,
                       const char *body, int body_len, int brief, struct spop_writer *out)
{
	size_t start = out->len;
	int n;

	spop_frame_begin(out, SPOP_FRAME_ACK, SPOP_FLAG_FIN, f->stream_id, f->frame_id);
	session_put_verdict(out, d, brief);
	if (!brief && body_len > 0)
		session_set_str(out, TXNVAR_BODY, body, (size_t)body_len);
	n = spop_frame_end(out);
	/* The writer's room is the whole output buffer; the peer's limit is smaller. */
	if (n > (int)s->max_frame_size + 4) {
		out->len = start;
		n = -1;
	}
	return n;
}

/* Estimates what an allowed request may use and admits it at its key, its team, its end
 * user, its key's and team's budgets for its model and its tags' budgets, all or none,
 * or turns d into the denial of the level that refused. */
static void session_quota(struct session *s, const struct keytable *kt,
                          const struct decision_request *req, struct decision *d)
{
	struct quota_subject at[ACCT_HOLDS];
	enum quota_level level[ACCT_HOLDS];
	const struct kt_team *team;
	const struct quota_cfg *eu;
	enum quota_verdict v;
	size_t n = 0, i, refused, len;

	if (d->verdict != DECISION_ALLOW)
		return;
	decision_estimate(d, req, s->default_max_tokens);
	if (!s->quota || !d->key)
		return;
	team = d->key->team;
	len = strlen(d->end_user);
	eu = keytable_end_user_limits(kt, d->key, d->end_user, len);
	d->end_user_quota = eu && quota_limited(eu) ? eu : NULL;
	if (d->model) {
		d->key_model_budget = keytable_model_budget(d->key->model_budgets,
		                                            d->key->nmodel_budgets, d->model->name);
		d->team_model_budget = team ? keytable_model_budget(team->model_budgets,
		                                                    team->nmodel_budgets,
		                                                    d->model->name) : NULL;
	}
	if (!quota_limited(&d->key->quota) && !(team && quota_limited(&team->quota)) &&
	    !d->end_user_quota && !d->key_model_budget && !d->team_model_budget &&
	    !d->ntag_budgets)
		return;
	d->has_quota = 1;
	level[n] = QUOTA_LEVEL_KEY;
	at[n++] = (struct quota_subject){ d->key->id, &d->key->quota, &d->holds[ACCT_HOLD_KEY],
	                                  0, NULL };
	if (team) {
		level[n] = QUOTA_LEVEL_TEAM;
		at[n++] = (struct quota_subject){ quota_team_subject(team->id), &team->quota,
		                                  &d->holds[ACCT_HOLD_TEAM], 0, NULL };
	}
	if (d->end_user_quota) {
		level[n] = QUOTA_LEVEL_END_USER;
		at[n++] = (struct quota_subject){
			keytable_end_user_subject(kt, d->key->id, d->end_user, len), d->end_user_quota,
			&d->holds[ACCT_HOLD_END_USER], d->key->id, d->end_user };
	}
	if (d->key_model_budget) {
		level[n] = QUOTA_LEVEL_KEY_MODEL;
		at[n++] = (struct quota_subject){ quota_key_model_subject(d->key_model_budget->id),
		                                  &d->key_model_budget->quota,
		                                  &d->holds[ACCT_HOLD_KEY_MODEL], 0,
		                                  d->key_model_budget->model };
	}
	if (d->team_model_budget) {
		level[n] = QUOTA_LEVEL_TEAM_MODEL;
		at[n++] = (struct quota_subject){ quota_team_model_subject(d->team_model_budget->id),
		                                  &d->team_model_budget->quota,
		                                  &d->holds[ACCT_HOLD_TEAM_MODEL], 0,
		                                  d->team_model_budget->model };
	}
	for (i = 0; i < d->ntag_budgets; i++) {
		level[n] = QUOTA_LEVEL_TAG;
		at[n++] = (struct quota_subject){ quota_tag_subject(d->tag_budgets[i]->id),
		                                  &d->tag_budgets[i]->quota,
		                                  &d->holds[ACCT_HOLD_TAGS + i], 0, NULL };
	}
	v = quota_admit_all(s->quota, at, n, d->est_tokens, d->est_cost_micros, acct_now_ms(),
	                    &d->quota, &refused);
	if (v == QUOTA_OK)
		return;
	if (level[refused] == QUOTA_LEVEL_TAG)
		d->refusing_tag = d->tag_budgets[refused - (n - d->ntag_budgets)];
	decision_limit(d, v, level[refused]);
}

/* A verdict without a decision: nothing about the request is known or kept. */
static void session_refuse(struct decision *d, struct decision_request *req,
                           enum decision_verdict v)
{
	memset(d, 0, sizeof(*d));
	memset(req, 0, sizeof(*req));
	d->verdict = v;
	d->stream = -1;
}

/* Stores one piece of a long body and writes its ACK: txn.tally.off, the next piece's
 * offset, while the body is incomplete; unset when it is whole or was refused (pieces
 * stop, and a refused body is judged on its first frame). Only a piece from the
 * gateway's HAProxy takes room, and a body's first piece only for an active key: nobody
 * else can make the agent, or HAProxy (which waits for the rest of a body in a large
 * buffer only once the first piece was taken), hold memory. */
static void session_piece(struct session *s, const struct keytable *kt,
                          const struct spop_frame *f, const struct spop_msg *m,
                          struct spop_writer *out)
{
	struct decision_request req;
	struct session_piece piece;
	struct spop_str id = { "", 0 };
	int64_t got = -1, key = 0;
	size_t start = out->len;

	if (session_read_request(m, &req, &id, &piece) < 0) {
		s->stats.bad_messages++;
	} else if (s->secret && !gwsecret_equal(s->secret, req.secret.ptr, req.secret.len)) {
		counters_refuse_unauthenticated();
	} else {
		s->authentic = 1;
		if (s->longbody && (piece.off > 0 || (key = decision_key_active(kt, &req))))
			got = longbody_append(s->longbody, id.ptr, id.len, key, piece.off,
			                      req.body_size, req.json_max, piece.data.ptr,
			                      piece.data.len, session_now_ms());
	}
	if (got < 0)
		stats_add(&stats.long_bodies_refused, 1);
	spop_frame_begin(out, SPOP_FRAME_ACK, SPOP_FLAG_FIN, f->stream_id, f->frame_id);
	if (got >= 0 && got < req.body_size)
		session_set_int(out, TXNVAR_PIECE_OFFSET, got);
	else
		spop_put_unset_var(out, SPOP_SCOPE_TXN, "off", 3);
	if (spop_frame_end(out) < 0)
		out->len = start;
	else
		stats_add(&stats.spop_frames_out, 1);
}

/* A body HAProxy cut in the decision's message but sent whole in pieces before it: when
 * all of its bytes came and they begin with the prefix the message carries, req's body
 * becomes the whole one, judged as any body seen whole. Returns the body (the caller's
 * to free), or NULL with req unchanged. */
static char *session_whole_body(struct longbody *lb, struct spop_str id,
                                struct decision_request *req)
{
	char *whole = NULL;
	size_t len = 0;

	if (!longbody_take(lb, id.ptr, id.len, &whole, &len, session_now_ms()))
		return NULL;
	if ((int64_t)len != req->body_size ||
	    (req->body.len && memcmp(whole, req->body.ptr, req->body.len) != 0)) {
		free(whole);
		return NULL;
	}
	req->body.ptr = whole;
	req->body.len = len;
	req->body_truncated = 0;
	stats_add(&stats.long_bodies_whole, 1);
	return whole;
}

/* The room for an answer's body (SESSION_BODY_MAX at most): what the ACK's frame leaves
 * after the other variables. */
static size_t session_body_room(const struct session *s)
{
	size_t room = s->max_frame_size > 1024 ? s->max_frame_size - 1024 : 0;

	return room < SESSION_BODY_MAX ? room : SESSION_BODY_MAX;
}

/* A model list into body; its length, or -1 when the peer's frames cannot hold one. */
static int session_models(const struct session *s, const struct keytable *kt,
                          const struct decision *d, const struct decision_request *req,
                          char *body)
{
	return wording_models_json(kt, d, req, body, session_body_room(s));
}

/* One level of a usage answer: subject's (a key's id, or its team's subject) under cfg
 * at now_ms, with its budgets per model mb[0..nmb) (subject_of: their subjects). 0, or
 * -1 when a spend cannot be read now. */
static int session_usage_level(struct session *s, int64_t subject, const struct quota_cfg *cfg,
                               const struct kt_model_budget *mb, size_t nmb,
                               int64_t (*subject_of)(int64_t), int64_t now_ms,
                               struct wording_usage_level *l)
{
	size_t i;

	/* tallyctl keeps an owner's budgets within the bound; a store written otherwise
	 * shows the first ones. */
	l->nmodels = nmb < MODELBUDGET_PER_OWNER_MAX ? nmb : MODELBUDGET_PER_OWNER_MAX;
	for (i = 0; i < l->nmodels; i++) {
		struct wording_usage_model *m = &l->models[i];

		m->b = &mb[i];
		m->since_ms = quota_period_start(mb[i].quota.period, mb[i].quota.tz, now_ms);
		m->until_ms = quota_period_end(mb[i].quota.period, mb[i].quota.tz, now_ms);
		if (usageview_spent(s->usage, subject_of(mb[i].id), mb[i].model, m->since_ms, now_ms,
		                    &m->spent_micros, &m->as_of_ms) < 0)
			return -1;
	}
	l->cfg = *cfg;
	l->period = quota_report_period(cfg);
	l->since_ms = quota_period_start(l->period, cfg->tz, now_ms);
	l->until_ms = quota_period_end(l->period, cfg->tz, now_ms);
	l->st = (struct quota_status){ -1, -1, -1, -1, -1, -1, 0 };
	l->in_flight = 0;
	if (s->quota)
		quota_peek(s->quota, subject, cfg, now_ms, &l->st, &l->in_flight);
	return usageview_spent(s->usage, subject, NULL, l->since_ms, now_ms, &l->spent_micros,
	                       &l->as_of_ms);
}

/* GET /tally/v1/usage: d's key's figures, and its team's where the team shows them to
 * its keys, into body (session_body_room); its length.
 * A spend that cannot be read turns d into DECISION_USAGE_UNAVAILABLE, a body that
 * cannot fit into DECISION_AGENT_ERROR: -1. */
static int session_usage(struct session *s, struct decision *d, char *body)
{
	const struct kt_team *team = d->key->team;
	int64_t now = acct_now_ms();
	struct wording_usage u;
	int n;

	memset(&u, 0, sizeof(u));
	u.team_shown = team && team->members_see_usage;
	if (!s->usage ||
	    session_usage_level(s, d->key->id, &d->key->quota, d->key->model_budgets,
	                        d->key->nmodel_budgets, quota_key_model_subject, now, &u.key) < 0 ||
	    (u.team_shown &&
	     session_usage_level(s, quota_team_subject(team->id), &team->quota, team->model_budgets,
	                         team->nmodel_budgets, quota_team_model_subject, now, &u.team) < 0)) {
		d->verdict = DECISION_USAGE_UNAVAILABLE;
		return -1;
	}
	n = wording_usage_json(d, &u, body, session_body_room(s));
	if (n < 0)
		d->verdict = DECISION_AGENT_ERROR;
	return n;
}

/* GET /tally/v1/usage/end_users: a page of d's key's end users in its budget's period,
 * into body (session_body_room); its length. A store that cannot be read turns d into
 * DECISION_USAGE_UNAVAILABLE, a body that cannot fit (or no memory) into
 * DECISION_AGENT_ERROR: -1. One more end user than the page is asked for, to know
 * whether another page follows (or where the page's reading stopped: usageview.h). */
static int session_end_users(struct session *s, struct decision *d, char *body)
{
	struct usageview_end_user *eu = calloc(DECISION_PAGE_MAX + 1, sizeof(*eu));
	char stopped[ACCT_END_USER_MAX];
	struct wording_usage_level l;
	int64_t now = acct_now_ms();
	int n = -1;

	memset(&l, 0, sizeof(l));
	l.period = quota_report_period(&d->key->quota);
	/* End users' spend is kept by UTC day (end_user_daily): their page counts UTC
	 * periods whatever the key's zone (l.cfg.tz NULL), and says so. */
	l.since_ms = quota_period_start(l.period, l.cfg.tz, now);
	l.until_ms = quota_period_end(l.period, l.cfg.tz, now);
	l.as_of_ms = now;
	if (!eu)
		d->verdict = DECISION_AGENT_ERROR;
	else if (!s->usage || (n = usageview_end_users(s->usage, d->key->id, l.since_ms,
	                                               d->page_after, now, eu,
	                                               d->page_limit + 1, stopped)) < 0)
		d->verdict = DECISION_USAGE_UNAVAILABLE;
	else if ((n = wording_end_users_json(d, &l, eu, n < d->page_limit ? n : d->page_limit,
	                                     n > d->page_limit ? "" : stopped[0] ? stopped : NULL,
	                                     body, session_body_room(s))) < 0)
		d->verdict = DECISION_AGENT_ERROR;
	free(eu);
	return n;
}

/* Asks the owners' store who made the stored response d names, and finishes d with
 * the answer. The key's creates in flight are read first: the intake notes an id
 * before it counts its create ended, so a count read as 0 means any id it had is in
 * the table already. */
static void session_owner(struct owner *owners, const struct decision_request *req,
                          struct decision *d, const struct keytable *kt)
{
	struct spop_str id = decision_owner_id(d, req);
	struct decision_owner o;

	memset(&o, 0, sizeof(o));
	o.pending = owner_creates_pending(owners, d->key->id);
	o.known = owner_get(owners, id.ptr, id.len, &o.e);
	decision_owned_by(kt, req, &o, d);
}

/* Writes the ACK for one NOTIFY frame: the verdict on our message, or a long body's
 * piece stored. */
static void session_notify(struct session *s, const struct keytable *kt,
                           const struct spop_frame *f, struct spop_writer *out)
{
	const unsigned char *p = f->payload, *end = f->payload + f->payload_len;
	struct decision_request req;
	struct decision d;
	struct spop_msg m;
	struct spop_str id = { "", 0 };
	char body[SESSION_BODY_MAX], *whole = NULL;
	int rc, found = 0, body_len = 0;

	s->stats.notifies++;
	while ((rc = spop_msg_next(&p, end, &m)) == 1) {
		if (session_key_is(m.name, SESSION_PIECE_MESSAGE)) {
			session_piece(s, kt, f, &m, out);
			return;
		}
		if (!session_key_is(m.name, SESSION_MESSAGE))
			continue;
		if (session_read_request(&m, &req, &id, NULL) < 0) {
			rc = -1;
			break;
		}
		found = 1;
	}
	if (rc < 0 || !found) {
		/* An explicit error, not silence: silence would look like an unreachable
		 * agent and, under fail-open, forward a request nobody judged. */
		s->stats.bad_messages++;
		session_refuse(&d, &req, DECISION_AGENT_ERROR);
	} else if (s->secret && !gwsecret_equal(s->secret, req.secret.ptr, req.secret.len)) {
		/* Not the gateway's HAProxy: nothing it sends may hold a key's limits or
		 * leave a transaction to account for. */
		counters_refuse_unauthenticated();
		session_refuse(&d, &req, DECISION_UNAUTHENTICATED);
		id.len = 0;
	} else {
		uint64_t t0 = stats_now_ns();

		s->authentic = 1;
		if (req.body_truncated && s->longbody)
			whole = session_whole_body(s->longbody, id, &req);
		req.policy = s->policy;
		decision_make(kt, &req, &d);
		if (d.owner_query && s->owners)
			session_owner(s->owners, &req, &d, kt);
		session_quota(s, kt, &req, &d);
		/* HAProxy will ask again about this body (decision.h, wait): it keeps its
		 * whole text for then. */
		if (whole && d.wait)
			longbody_append(s->longbody, id.ptr, id.len, d.key ? d.key->id : 0, 0,
			                req.body_size, req.json_max, whole, req.body.len,
			                session_now_ms());
		stats_hist_observe(&stats.decision_latency, stats_now_ns() - t0);
	}
	if (d.verdict == DECISION_MODELS_LISTED &&
	    (body_len = session_models(s, kt, &d, &req, body)) < 0)
		d.verdict = DECISION_AGENT_ERROR;
	if (d.verdict == DECISION_USAGE_REPORTED)
		body_len = d.end_users_page ? session_end_users(s, &d, body) : session_usage(s, &d, body);
	if (s->on_decided && d.verdict != DECISION_UNAUTHENTICATED &&
	    s->on_decided(s->decided_arg, id, &d) < 0)
		d.verdict = DECISION_BUSY;
	s->stats.verdicts[d.verdict]++;
	stats_add(&stats.verdicts[d.verdict], 1);
	if (session_id_printable(id))
		log_debug("decision %.*s: %s", (int)id.len, id.ptr, decision_verdict_name(d.verdict));
	if (d.verdict != DECISION_ALLOW && d.verdict != DECISION_MODELS_LISTED &&
	    d.verdict != DECISION_USAGE_REPORTED)
		body_len = wording_error_json(&d, &req, body, 2048);
	/* A peer that negotiated a tiny frame still gets the verdict and status. */
	if (session_ack(s, f, &d, body, body_len, 0, out) < 0)
		session_ack(s, f, &d, body, body_len, 1, out);
	stats_add(&stats.spop_frames_out, 1);
	free(whole);
}

static enum session_result session_frame(struct session *s, const struct keytable *kt,
                                         const struct spop_frame *f, struct spop_writer *out)
{
	if (!(f->flags & SPOP_FLAG_FIN))
		return session_fail(s, out, SPOP_ERR_FRAG_NOT_SUPPORTED);
	switch (f->type) {
	case SPOP_FRAME_HAPROXY_HELLO:
		if (s->state != SESSION_WAIT_HELLO)
			return session_fail(s, out, SPOP_ERR_INVALID);
		return session_hello(s, f, out);
	case SPOP_FRAME_NOTIFY:
		if (s->state != SESSION_READY)
			return session_fail(s, out, SPOP_ERR_INVALID);
		if (!(f->flags & SPOP_FLAG_ABORT))
			session_notify(s, kt, f, out);
		return SESSION_CONTINUE;
	case SPOP_FRAME_HAPROXY_DISCONNECT:
		spop_agent_disconnect_encode(out, SPOP_ERR_NONE, "bye");
		s->state = SESSION_CLOSED;
		return SESSION_CLOSE;
	case SPOP_FRAME_AGENT_HELLO:
	case SPOP_FRAME_AGENT_DISCONNECT:
	case SPOP_FRAME_ACK:
	case SPOP_FRAME_UNSET:
		return session_fail(s, out, SPOP_ERR_INVALID);
	default:
		/* SPOE.txt lets a peer skip frame types it does not know: a newer HAProxy
		 * may send some, and dropping the connection for them helps nobody. */
		s->stats.skipped_frames++;
		return SESSION_CONTINUE;
	}
}

enum session_result session_feed(struct session *s, const struct keytable *kt,
                                 const unsigned char *in, size_t len, size_t *consumed,
                                 struct spop_writer *out)
{
	size_t used = 0;
	enum session_result r = SESSION_CONTINUE;

	while (s->state != SESSION_CLOSED && out->cap - out->len >= (size_t)s->max_frame_size + 4) {
		struct spop_frame f;
		enum spop_status err;
		size_t n;
		int rc = spop_frame_decode(in + used, len - used, s->max_frame_size, &f, &n, &err);

		if (rc == 0)
			break;
		if (rc < 0) {
			r = session_fail(s, out, err);
			break;
		}
		used += n;
		stats_add(&stats.spop_frames_in, 1);
		r = session_frame(s, kt, &f, out);
		if (r == SESSION_CLOSE)
			break;
	}
	*consumed = used;
	return s->state == SESSION_CLOSED ? SESSION_CLOSE : r;
}
