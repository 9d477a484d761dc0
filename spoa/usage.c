/* usage: reading reported token usage (see usage.h). Pure; intake thread.
 *
 * A captured answer comes as the summary haproxy/capture.lua built while the body
 * passed: the members at the documented paths of the answer's JSON (a unary answer's
 * top-level usage, model, id, service_tier) or of its events' data (an OpenAI chunk's
 * usage; Anthropic's message_start message.usage and message_delta usage; a Responses
 * terminal event's response.usage), and nothing else. Which event says what is decided
 * here, by the event's type, never by where bytes happen to be. */
#include "usage.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"

#define USAGE_MAX_COUNT 9007199254740991LL   /* 2^53 - 1: exact in a double */

void usage_none(struct usage *u)
{
	memset(u, 0, sizeof(*u));
	u->prompt_tokens = u->completion_tokens = u->cached_tokens = ACCT_NONE;
	u->cache_creation_tokens = u->reasoning_tokens = ACCT_NONE;
	u->cache_creation_1h_tokens = u->audio_input_tokens = u->audio_output_tokens = ACCT_NONE;
	u->accepted_prediction_tokens = u->rejected_prediction_tokens = ACCT_NONE;
	u->web_search_calls = ACCT_NONE;
	u->source = ACCT_USAGE_NONE;
}

/* A model name worth recording: non-empty, fits, no control bytes (it ends up in the
 * database and in logs). A name spelling a NUL, which cJSON would cut, is never kept by
 * the capture filter. */
static int usage_model_ok(const cJSON *j, size_t cap)
{
	const unsigned char *c;

	if (!cJSON_IsString(j) || !j->valuestring || !*j->valuestring ||
	    strlen(j->valuestring) >= cap)
		return 0;
	for (c = (const unsigned char *)j->valuestring; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return 0;
	return 1;
}

static void usage_model(const cJSON *j, char *out, size_t cap)
{
	if (!out[0] && usage_model_ok(j, cap))
		memcpy(out, j->valuestring, strlen(j->valuestring) + 1);
}

/* A count: a non-negative integer below 2^53, else ACCT_NONE. */
static int64_t usage_count(const cJSON *v)
{
	double d;

	if (!cJSON_IsNumber(v))
		return ACCT_NONE;
	d = v->valuedouble;
	if (!(d >= 0) || d > (double)USAGE_MAX_COUNT || d != (double)(int64_t)d)
		return ACCT_NONE;
	return (int64_t)d;
}

static const cJSON *usage_get(const cJSON *obj, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(obj, name);
}

struct usage_place {
	const char *parent, *name;
};

/* Each member's place (usage.h's table); in_usage is the caller's to heed. */
static const struct usage_place usage_places[USAGE_MEMBERS] = {
#define USAGE_PLACE(id, dialects, in_usage, parent, name, var) { parent, name },
	USAGE_MEMBER_TABLE(USAGE_PLACE)
#undef USAGE_PLACE
};

/* The member m of obj (a usage object or an answer, as the table places m); NULL if
 * absent, or if its parent is no object. */
static const cJSON *usage_member(const cJSON *obj, enum usage_member m)
{
	const struct usage_place *p = &usage_places[m];

	if (p->parent && !cJSON_IsObject(obj = usage_get(obj, p->parent)))
		return NULL;
	return usage_get(obj, p->name);
}

static int64_t usage_at(const cJSON *obj, enum usage_member m)
{
	return usage_count(usage_member(obj, m));
}

/* The dialect of a usage object (usage.h): OpenAI's Chat Completions names neither
 * input_tokens nor output_tokens; of the two that do, the Responses API alone details
 * them. */
static int usage_dialect(const cJSON *u)
{
	if (!usage_member(u, USAGE_M_INPUT) && !usage_member(u, USAGE_M_OUTPUT))
		return USAGE_CHAT;
	return cJSON_IsObject(usage_get(u, "input_tokens_details")) ||
	       cJSON_IsObject(usage_get(u, "output_tokens_details")) ? USAGE_RESPONSES
	                                                              : USAGE_MESSAGES;
}

/* Input + cache read + cache creation; counts below 2^53 cannot overflow. */
static int64_t usage_total_input(int64_t input, int64_t read, int64_t creation)
{
	if (input == ACCT_NONE)
		return ACCT_NONE;
	return input + (read == ACCT_NONE ? 0 : read) + (creation == ACCT_NONE ? 0 : creation);
}

/* Whether s (n bytes) names the tier an answer was served at: a plain name
 * (tier_name_ok), and not "auto", which echoes a request that left the choice open. */
static int usage_tier_ok(const char *s, size_t n)
{
	return tier_name_ok(s, n) && !(n == 4 && memcmp(s, "auto", 4) == 0);
}

/* A reported service tier, kept when usage_tier_ok takes it and none is kept yet. */
static void usage_tier(const cJSON *j, struct usage *out)
{
	if (!out->service_tier[0] && cJSON_IsString(j) && j->valuestring &&
	    usage_tier_ok(j->valuestring, strlen(j->valuestring)))
		snprintf(out->service_tier, sizeof(out->service_tier), "%s", j->valuestring);
}

/* Anthropic's input side: its input_tokens leave out the cache reads and writes. */
static void usage_messages_input(const cJSON *u, struct usage *out)
{
	out->cached_tokens = usage_at(u, USAGE_M_CACHE_READ);
	out->cache_creation_tokens = usage_at(u, USAGE_M_MSG_CACHE_WRITE);
	out->cache_creation_1h_tokens = usage_at(u, USAGE_M_CACHE_1H);
	out->prompt_tokens = usage_total_input(usage_at(u, USAGE_M_INPUT),
	                                       out->cached_tokens, out->cache_creation_tokens);
	usage_tier(usage_member(u, USAGE_M_MSG_TIER), out);
}

static void usage_messages_output(const cJSON *u, struct usage *out)
{
	out->completion_tokens = usage_at(u, USAGE_M_OUTPUT);
	out->web_search_calls = usage_at(u, USAGE_M_WEB_SEARCH);
}

/* The Responses API's input_tokens count its cached tokens already. */
static void usage_responses(const cJSON *u, struct usage *out)
{
	out->prompt_tokens = usage_at(u, USAGE_M_INPUT);
	out->completion_tokens = usage_at(u, USAGE_M_OUTPUT);
	out->cached_tokens = usage_at(u, USAGE_M_RESP_CACHED);
	out->cache_creation_tokens = usage_at(u, USAGE_M_RESP_CACHE_WRITE);
	out->reasoning_tokens = usage_at(u, USAGE_M_RESP_REASONING);
}

static void usage_chat(const cJSON *u, struct usage *out)
{
	out->prompt_tokens = usage_at(u, USAGE_M_PROMPT);
	out->completion_tokens = usage_at(u, USAGE_M_COMPLETION);
	out->cached_tokens = usage_at(u, USAGE_M_CHAT_CACHED);
	out->cache_creation_tokens = usage_at(u, USAGE_M_CHAT_CACHE_WRITE);
	out->audio_input_tokens = usage_at(u, USAGE_M_AUDIO_IN);
	out->reasoning_tokens = usage_at(u, USAGE_M_CHAT_REASONING);
	out->audio_output_tokens = usage_at(u, USAGE_M_AUDIO_OUT);
	out->accepted_prediction_tokens = usage_at(u, USAGE_M_PREDICTED);
	out->rejected_prediction_tokens = usage_at(u, USAGE_M_MISPREDICTED);
}

/* The source when some count was read; a usage object without counts is no usage. */
static enum acct_usage_source usage_source_if_counts(const struct usage *u,
                                                     enum acct_usage_source s)
{
	return u->prompt_tokens != ACCT_NONE || u->completion_tokens != ACCT_NONE ? s
	       : ACCT_USAGE_NONE;
}

/* Whether an event's data has the type t (a string, as its "type" member). */
static int usage_type_is(const cJSON *data, const char *t)
{
	const cJSON *v = usage_get(data, "type");

	return cJSON_IsString(v) && v->valuestring && strcmp(v->valuestring, t) == 0;
}

/* A usage object of any dialect, with the source it is read as; the dialect, or 0 when
 * u is no object. */
static int usage_object(const cJSON *u, enum acct_usage_source source, struct usage *out)
{
	int dialect;

	if (!cJSON_IsObject(u))
		return 0;
	dialect = usage_dialect(u);
	if (dialect == USAGE_MESSAGES) {
		usage_messages_input(u, out);
		usage_messages_output(u, out);
	} else if (dialect == USAGE_RESPONSES) {
		usage_responses(u, out);
	} else {
		usage_chat(u, out);
	}
	out->source = usage_source_if_counts(out, source);
	return dialect;
}

/* A unary answer: its top-level members. */
static void usage_answer(const cJSON *a, struct usage *out)
{
	int dialect = usage_object(usage_get(a, "usage"), ACCT_USAGE_RESPONSE, out);

	usage_model(usage_member(a, USAGE_M_MODEL), out->model, sizeof(out->model));
	if (dialect != USAGE_MESSAGES)
		usage_tier(usage_member(a, USAGE_M_TIER), out);
}

/* The events the summary kept: the first, the first with a usage object (start) and
 * the last with one (last), each NULL when none; data is each one's kept members. */
struct usage_events {
	const cJSON *first, *start, *last;
};

static void usage_events_of(const cJSON *list, struct usage_events *ev)
{
	const cJSON *e;

	memset(ev, 0, sizeof(*ev));
	cJSON_ArrayForEach(e, list) {
		const cJSON *r = usage_get(e, "r"), *d = usage_get(e, "d");

		if (!cJSON_IsString(r) || !r->valuestring || !cJSON_IsObject(d))
			continue;
		if (strchr(r->valuestring, 'f') && !ev->first)
			ev->first = d;
		if (strchr(r->valuestring, 's') && !ev->start)
			ev->start = d;
		if (strchr(r->valuestring, 'l'))
			ev->last = d;
	}
}

/* The model of a stream: the first event's (an OpenAI chunk's model, Anthropic's
 * message_start message.model, a Responses response.created response.model), else the
 * last usage event's. */
static void usage_stream_model(const struct usage_events *ev, struct usage *out)
{
	const cJSON *from[2] = { ev->first, ev->last };
	int i;

	for (i = 0; i < 2 && !out->model[0]; i++) {
		if (!from[i])
			continue;
		usage_model(usage_get(from[i], "model"), out->model, sizeof(out->model));
		usage_model(usage_get(usage_get(from[i], "message"), "model"), out->model,
		            sizeof(out->model));
		usage_model(usage_get(usage_get(from[i], "response"), "model"), out->model,
		            sizeof(out->model));
	}
}

/* Whether an event is a Responses stream's terminal one, which alone carries its usage. */
static int usage_responses_terminal(const cJSON *d)
{
	return usage_type_is(d, "response.completed") || usage_type_is(d, "response.incomplete") ||
	       usage_type_is(d, "response.failed");
}

/* An event stream, by the type of the events that carry usage: a Responses terminal
 * event's response.usage; Anthropic's message_start message.usage (input) and last
 * message_delta usage (output, and input when it repeats it); else an OpenAI chunk's
 * top-level usage (the usage chunk, or the last of a server's running counts). */
static void usage_stream(const struct usage_events *ev, struct usage *out)
{
	const cJSON *last = ev->last, *start = ev->start, *u;
	const cJSON *msg_usage = start && usage_type_is(start, "message_start")
	                         ? usage_get(usage_get(start, "message"), "usage") : NULL;

	if (!last)
		return;
	if (usage_responses_terminal(last)) {
		const cJSON *resp = usage_get(last, "response");

		out->ended = 1;
		usage_object(usage_get(resp, "usage"), ACCT_USAGE_STREAM, out);
		usage_tier(usage_get(resp, "service_tier"), out);
		if (ev->first)
			usage_tier(usage_get(usage_get(ev->first, "response"), "service_tier"), out);
		return;
	}
	if (usage_type_is(last, "message_delta") && cJSON_IsObject(u = usage_get(last, "usage"))) {
		usage_messages_input(usage_member(u, USAGE_M_INPUT) || !cJSON_IsObject(msg_usage)
		                     ? u : msg_usage, out);
		usage_messages_output(u, out);
		/* The last delta repeats the input counts but not the tier: message_start has it. */
		if (cJSON_IsObject(msg_usage))
			usage_tier(usage_get(msg_usage, "service_tier"), out);
		out->source = usage_source_if_counts(out, ACCT_USAGE_STREAM);
		return;
	}
	if (last == start && cJSON_IsObject(msg_usage)) {
		/* Cut after message_start: the input is known, the output is not (never
		 * message_start's placeholder count). */
		usage_messages_input(msg_usage, out);
		out->source = usage_source_if_counts(out, ACCT_USAGE_PARTIAL);
		return;
	}
	/* A Responses or Anthropic event other than those carries no usage of its own (its
	 * response or message is an object: a path runs through objects only, as the filter
	 * keeps them). */
	if (cJSON_IsObject(usage_get(last, "response")) || cJSON_IsObject(usage_get(last, "message")) ||
	    !cJSON_IsObject(u = usage_get(last, "usage")))
		return;
	usage_object(u, ACCT_USAGE_STREAM, out);
	/* OpenAI names the tier in the chunk that holds the usage, else the first chunk. */
	usage_tier(usage_get(last, "service_tier"), out);
	if (ev->first)
		usage_tier(usage_get(ev->first, "service_tier"), out);
}

/* The summary (capture.lua) parsed; NULL if it is none. */
static cJSON *usage_summary(const char *sum, size_t len)
{
	return sum && len ? cJSON_ParseWithLength(sum, len) : NULL;
}

void usage_from_capture(const char *sum, size_t len, int sse, struct usage *out)
{
	struct usage_events ev;
	cJSON *j = usage_summary(sum, len);

	usage_none(out);
	if (!cJSON_IsObject(j))
		goto out;
	if (!sse) {
		const cJSON *a = usage_get(j, "a");

		if (cJSON_IsObject(a))
			usage_answer(a, out);
		goto out;
	}
	usage_events_of(usage_get(j, "ev"), &ev);
	usage_stream_model(&ev, out);
	usage_stream(&ev, out);
out:
	cJSON_Delete(j);
}

/* A count from a record field: HAProxy prints any int64 json_query gave it. */
static int64_t usage_bounded(int64_t v)
{
	return v >= 0 && v <= USAGE_MAX_COUNT ? v : ACCT_NONE;
}

void usage_from_fields(const struct record *r, struct usage *out)
{
	int64_t u[RECORD_U_COUNT];
	int i;

	usage_none(out);
	snprintf(out->model, sizeof(out->model), "%s", r->u_model);
	for (i = 0; i < RECORD_U_COUNT; i++)
		u[i] = usage_bounded(r->u[i]);
	if (u[RECORD_U_INPUT] != ACCT_NONE || u[RECORD_U_OUTPUT] != ACCT_NONE) {
		/* Anthropic's input leaves out its cache reads and writes; the Responses API's
		 * counts both, and names its cached tokens as OpenAI does (tally.cfg reads
		 * them into OpenAI's field, as the capture tells the two apart). */
		out->cache_creation_tokens = u[RECORD_U_CACHE_CREATION];
		if (u[RECORD_U_CACHED] != ACCT_NONE) {
			out->prompt_tokens = u[RECORD_U_INPUT];
			out->cached_tokens = u[RECORD_U_CACHED];
		} else {
			out->prompt_tokens = usage_total_input(u[RECORD_U_INPUT], u[RECORD_U_CACHE_READ],
			                                       out->cache_creation_tokens);
			out->cached_tokens = u[RECORD_U_CACHE_READ];
		}
		out->reasoning_tokens = u[RECORD_U_REASONING];
		out->completion_tokens = u[RECORD_U_OUTPUT];
	} else if (u[RECORD_U_PROMPT] != ACCT_NONE || u[RECORD_U_COMPLETION] != ACCT_NONE) {
		/* OpenAI's cache writes come in the field of Anthropic's (tally.cfg). */
		out->cache_creation_tokens = u[RECORD_U_CACHE_CREATION];
		out->prompt_tokens = u[RECORD_U_PROMPT];
		out->completion_tokens = u[RECORD_U_COMPLETION];
		out->cached_tokens = u[RECORD_U_CACHED];
		out->reasoning_tokens = u[RECORD_U_REASONING];
	} else {
		return;
	}
	out->cache_creation_1h_tokens = u[RECORD_U_CACHE_1H];
	out->audio_input_tokens = u[RECORD_U_AUDIO_INPUT];
	out->audio_output_tokens = u[RECORD_U_AUDIO_OUTPUT];
	out->accepted_prediction_tokens = u[RECORD_U_PREDICTION_ACCEPTED];
	out->rejected_prediction_tokens = u[RECORD_U_PREDICTION_REJECTED];
	out->web_search_calls = u[RECORD_U_WEB_SEARCH];
	if (r->u_tier.len < sizeof(out->service_tier)) {
		memcpy(out->service_tier, r->u_tier.ptr ? r->u_tier.ptr : "", r->u_tier.len);
		out->service_tier[r->u_tier.len] = '\0';
	}
	out->source = ACCT_USAGE_RESPONSE;
}

void usage_response_id(const char *sum, size_t len, int sse, char *out, size_t cap)
{
	struct usage_events ev;
	const cJSON *id = NULL;
	cJSON *j = usage_summary(sum, len);

	out[0] = '\0';
	if (!cJSON_IsObject(j))
		goto out;
	if (!sse) {
		id = usage_member(usage_get(j, "a"), USAGE_M_ID);
	} else {
		usage_events_of(usage_get(j, "ev"), &ev);
		if (ev.first && usage_type_is(ev.first, "response.created"))
			id = usage_get(usage_get(ev.first, "response"), "id");
	}
	if (cJSON_IsString(id) && id->valuestring && strlen(id->valuestring) < cap &&
	    acct_response_id_ok(id->valuestring, strlen(id->valuestring)))
		memcpy(out, id->valuestring, strlen(id->valuestring) + 1);
out:
	cJSON_Delete(j);
}
