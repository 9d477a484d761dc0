/* Unit tests of usage: token counts from response bodies read by the capture filter's
 * structural reader (haproxy/capture.lua, run here under an embedded Lua) and from the
 * json_query fields of a record, for OpenAI, Anthropic and the
 * OpenAI-compatible servers (vLLM, llama.cpp, Ollama). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luacap.h"
#include "record.h"
#include "record_lines.h"
#include "unit.h"
#include "usage.h"

#define FIELD_MAX 16384

/* The record field capture.lua publishes for body, read at once. */
static const char *field_of(const char *body, size_t len, size_t split, int sse)
{
	static char field[FIELD_MAX];
	int64_t ws;

	if (luacap_read(body, len, split, sse, 1, field, sizeof(field), &ws) < 0)
		return NULL;
	return field;
}

/* A body read by the capture filter (haproxy/capture.lua under an embedded Lua), then
 * by the agent: the same summary whatever reads HAProxy hands the filter. */
static void from_body(const char *body, int sse, struct usage *u)
{
	static const size_t splits[] = { 1, 2, 7, 64, 1000 };
	size_t len = strlen(body), i;
	char whole[FIELD_MAX];
	const char *f = field_of(body, len, 0, sse);

	CHECK(f != NULL);
	if (!f) {
		usage_from_capture(NULL, 0, sse, u);
		return;
	}
	snprintf(whole, sizeof(whole), "%s", f);
	for (i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		const char *g = splits[i] < len ? field_of(body, len, splits[i], sse) : whole;

		CHECK(g && strcmp(g, whole) == 0);
	}
	f = luacap_summary(whole);
	usage_from_capture(f, f ? strlen(f) : 0, sse, u);
}

/* A body given in two parts, read as one. */
static void from_parts(const char *head, const char *tail, int sse, struct usage *u)
{
	char *body = malloc(strlen(head) + strlen(tail) + 1);

	strcpy(body, head);
	strcat(body, tail);
	from_body(body, sse, u);
	free(body);
}

/* What intake does with a record: its capture, else its json_query fields. */
static int from_record(const char *line, struct usage *u)
{
	struct record r;

	if (record_parse(line, strlen(line), &r) < 0)
		return -1;
	if (!r.has_capture) {
		usage_from_fields(&r, u);
		return 0;
	}
	usage_from_capture(r.summary.ptr, r.summary.len, r.cap_kind == 's', u);
	return 0;
}

#define CHECK_COUNTS(u, p, c, cached, creation, reasoning)                        \
	do {                                                                          \
		CHECK_EQ_INT((u).prompt_tokens, p);                                       \
		CHECK_EQ_INT((u).completion_tokens, c);                                   \
		CHECK_EQ_INT((u).cached_tokens, cached);                                  \
		CHECK_EQ_INT((u).cache_creation_tokens, creation);                        \
		CHECK_EQ_INT((u).reasoning_tokens, reasoning);                            \
	} while (0)

#define N ACCT_NONE

static const char openai_unary[] =
	"{\n  \"id\": \"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\n  \"object\": \"chat.completion\",\n"
	"  \"created\": 1741569952,\n  \"model\": \"gpt-4o-2024-08-06\",\n  \"choices\": [\n    {\n"
	"      \"index\": 0,\n      \"message\": {\n        \"role\": \"assistant\",\n"
	"        \"content\": \"Hello! How can I assist you today?\",\n        \"refusal\": null,\n"
	"        \"annotations\": []\n      },\n      \"logprobs\": null,\n"
	"      \"finish_reason\": \"stop\"\n    }\n  ],\n  \"usage\": {\n    \"prompt_tokens\": 2006,\n"
	"    \"completion_tokens\": 300,\n    \"total_tokens\": 2306,\n"
	"    \"prompt_tokens_details\": {\n      \"cached_tokens\": 1920,\n      \"audio_tokens\": 0\n"
	"    },\n    \"completion_tokens_details\": {\n      \"reasoning_tokens\": 192,\n"
	"      \"audio_tokens\": 0,\n      \"accepted_prediction_tokens\": 0,\n"
	"      \"rejected_prediction_tokens\": 0\n    }\n  },\n  \"service_tier\": \"default\",\n"
	"  \"system_fingerprint\": \"fp_fc9f1d7035\"\n}\n";

#define OPENAI_CHUNK(content)                                                     \
	"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,"  \
	"\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_1\",\"choices\":"   \
	"[{\"index\":0,\"delta\":{\"content\":\"" content "\"},\"logprobs\":null,"        \
	"\"finish_reason\":null}],\"usage\":null}"

#define OPENAI_FINAL                                                              \
	"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,"  \
	"\"model\":\"gpt-4o-mini-2024-07-18\",\"system_fingerprint\":\"fp_1\",\"choices\":[]," \
	"\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21,"      \
	"\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},"               \
	"\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0}}}"

#define ANTHROPIC_START                                                           \
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"       \
	"\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"                  \
	"\"claude-sonnet-4-20250514\",\"content\":[],\"stop_reason\":null,"                 \
	"\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,"                           \
	"\"cache_creation_input_tokens\":2000,\"cache_read_input_tokens\":1000,"            \
	"\"output_tokens\":1,\"service_tier\":\"standard\"}}}\n\n"                          \
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"  \
	"\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"                         \
	"event: ping\ndata: {\"type\": \"ping\"}\n\n"

#define ANTHROPIC_DELTA(text)                                                     \
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"  \
	"\"delta\":{\"type\":\"text_delta\",\"text\":\"" text "\"}}\n\n"

#define ANTHROPIC_END                                                             \
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" \
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":" \
	"\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n"          \
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

static void test_openai_unary(void)
{
	struct usage u;

	from_body(openai_unary, 0, &u);
	CHECK_COUNTS(u, 2006, 300, 1920, N, 192);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_STR(u.model, "gpt-4o-2024-08-06");
	/* the record's capture has its control bytes turned into spaces */
	{
		char *flat = strdup(openai_unary), *p;

		for (p = flat; *p; p++)
			if (*p == '\n')
				*p = ' ';
		from_body(flat, 0, &u);
		CHECK_COUNTS(u, 2006, 300, 1920, N, 192);
		free(flat);
	}
	/* usage near the end of a long body: only the tail has it */
	from_parts("{\"id\":\"chatcmpl-2\",\"object\":\"chat.completion\",\"model\":\"gpt-4.1\","
	           "\"choices\":[{\"message\":{\"content\":\"aaaa",
	           "aaaa\"}}],\"usage\":{\"prompt_tokens\":5000,\"completion_tokens\":7000,"
	           "\"total_tokens\":12000}}", 0, &u);
	CHECK_COUNTS(u, 5000, 7000, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_STR(u.model, "gpt-4.1");
}

static void test_openai_stream(void)
{
	static const char lf[] = OPENAI_CHUNK("Hel") "\n\n" OPENAI_CHUNK("lo") "\n\n"
		OPENAI_FINAL "\n\ndata: [DONE]\n\n";
	static const char crlf[] = OPENAI_CHUNK("Hel") "\r\n\r\n" OPENAI_CHUNK("lo") "\r\n\r\n"
		OPENAI_FINAL "\r\n\r\ndata: [DONE]\r\n\r\n";
	struct usage u;

	from_body(lf, 1, &u);
	CHECK_COUNTS(u, 9, 12, 0, N, 0);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "gpt-4o-mini-2024-07-18");
	from_body(crlf, 1, &u);
	CHECK_COUNTS(u, 9, 12, 0, N, 0);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* "usage":null in every chunk, and no final chunk (client gone, or no
	 * include_usage): nothing, but the model the upstream named */
	from_body(OPENAI_CHUNK("Hel") "\n\n" OPENAI_CHUNK("lo") "\n\n", 1, &u);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_EQ_STR(u.model, "gpt-4o-mini-2024-07-18");
	/* a long stream: head, gap, the final chunk in the tail */
	from_parts(OPENAI_CHUNK("Hel") "\n\n" OPENAI_CHUNK("lo"),
	           "ed\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
	           OPENAI_FINAL "\n\ndata: [DONE]\n\n", 1, &u);
	CHECK_COUNTS(u, 9, 12, 0, N, 0);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* A "message" that is no object is no Anthropic event: the usage beside it counts,
	 * read from the summary or from the whole event alike (fuzz_answer). */
	{
		static const char sum[] = "{\"n\":1,\"ws\":0,\"ev\":[{\"r\":\"fsl\",\"e\":\"\",\"d\":{"
			"\"model\":\"gpt-4o\",\"message\":[],\"usage\":{\"prompt_tokens\":5,"
			"\"completion_tokens\":7}}}]}";

		usage_from_capture(sum, sizeof(sum) - 1, 1, &u);
	}
	CHECK_COUNTS(u, 5, 7, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
}

static void test_anthropic_unary(void)
{
	struct usage u;

	from_body("{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":"
	          "\"claude-3-5-haiku-20241022\",\"content\":[{\"type\":\"text\",\"text\":\"Hi\"}],"
	          "\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":"
	          "12,\"cache_creation_input_tokens\":30,\"cache_read_input_tokens\":400,"
	          "\"output_tokens\":6,\"service_tier\":\"standard\"}}", 0, &u);
	CHECK_COUNTS(u, 12 + 30 + 400, 6, 400, 30, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_STR(u.model, "claude-3-5-haiku-20241022");
	/* no cache fields: input only */
	from_body("{\"model\":\"claude\",\"usage\":{\"input_tokens\":7,\"output_tokens\":3}}", 0, &u);
	CHECK_COUNTS(u, 7, 3, N, N, N);
	/* an error body */
	from_body("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":"
	          "\"Overloaded\"}}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_STR(u.model, "");
}

static void test_anthropic_stream(void)
{
	static const char whole[] = ANTHROPIC_START ANTHROPIC_DELTA("Hello") ANTHROPIC_DELTA("!")
		ANTHROPIC_END;
	struct usage u;

	from_body(whole, 1, &u);
	CHECK_COUNTS(u, 472 + 2000 + 1000, 15, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "claude-sonnet-4-20250514");
	/* message_start in the head, message_delta in the tail */
	from_parts(ANTHROPIC_START ANTHROPIC_DELTA("Hel"),
	           "lo\"}}\n\n" ANTHROPIC_DELTA("!") ANTHROPIC_END, 1, &u);
	CHECK_COUNTS(u, 3472, 15, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* a newer message_delta repeats the (final) input counts: they win */
	from_body(ANTHROPIC_START "event: message_delta\ndata: {\"type\":\"message_delta\","
	          "\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":500,"
	          "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":1000,"
	          "\"output_tokens\":20,\"server_tool_use\":{\"web_search_requests\":1}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 1500, 20, 1000, 0, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* no message_start (a proxy dropped it): the output still counts */
	from_body("event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":"
	          "{\"output_tokens\":15}}\n\n", 1, &u);
	CHECK_COUNTS(u, N, 15, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
}

static void test_anthropic_stream_cut(void)
{
	static const char cut[] = ANTHROPIC_START ANTHROPIC_DELTA("Hello");
	struct usage u;

	/* message_start and some text, then the upstream went away: input known, output
	 * NULL (not message_start's placeholder 1) */
	from_body(cut, 1, &u);
	CHECK_COUNTS(u, 3472, N, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_PARTIAL);
	CHECK_EQ_STR(u.model, "claude-sonnet-4-20250514");
	/* the same with a gap: text only in the tail */
	from_parts(ANTHROPIC_START ANTHROPIC_DELTA("Hel"),
	           "lo\"}}\n\n" ANTHROPIC_DELTA("more") ANTHROPIC_DELTA("text"), 1, &u);
	CHECK_COUNTS(u, 3472, N, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_PARTIAL);
	/* cut inside message_start's usage: nothing */
	from_body("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{"
	          "\"model\":\"claude-x\",\"usage\":{\"input_tokens\":47", 1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_STR(u.model, "claude-x");
	/* an error event after message_start: partial as well */
	from_body(ANTHROPIC_START "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
	          "\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", 1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_PARTIAL);
	CHECK_EQ_INT(u.completion_tokens, N);
}

/* The usage and model at their documented paths only, whatever the client made the
 * upstream echo around them (the Responses API repeats instructions, tools, text and
 * metadata around its usage), and however the JSON is spelled. */
static void test_structure_only(void)
{
	struct usage u;

	/* a forged usage object in a tool's schema, a forged model in metadata: the real
	 * ones are read (issue: billed 1 + 1 at another model's price) */
	from_body("{\"id\":\"resp_1\",\"object\":\"response\",\"instructions\":\"\\\"usage\\\":"
	          "{\\\"input_tokens\\\":1}\",\"model\":\"gpt-5\",\"output\":[],\"tools\":"
	          "[{\"type\":\"function\",\"parameters\":{\"usage\":{\"input_tokens\":1,"
	          "\"output_tokens\":1},\"model\":\"cheap\"}}],\"usage\":{\"input_tokens\":50000,"
	          "\"output_tokens\":20000},\"user\":null,\"metadata\":{\"model\":\"cheap\","
	          "\"usage\":\"{}\"}}", 0, &u);
	CHECK_COUNTS(u, 50000, 20000, N, N, N);
	CHECK_EQ_STR(u.model, "gpt-5");
	/* the model after the usage, in metadata before the real one: still the real */
	from_body("{\"metadata\":{\"model\":\"cheap\"},\"usage\":{\"prompt_tokens\":3,"
	          "\"completion_tokens\":4},\"model\":\"gpt-4o\"}", 0, &u);
	CHECK_COUNTS(u, 3, 4, N, N, N);
	CHECK_EQ_STR(u.model, "gpt-4o");
	/* pretty-printed, escaped key names, duplicates (the first counts, as cJSON and
	 * json_query take it) */
	from_body("{\n  \"model\" :\t\"m\",\r\n  \"us\\u0061ge\" : {\n    \"prompt_tokens\" : 9 ,"
	          "\n    \"completion_tokens\": 8\n  },\n  \"usage\": {\"prompt_tokens\": 1}\n}\n",
	          0, &u);
	CHECK_COUNTS(u, 9, 8, N, N, N);
	CHECK_EQ_STR(u.model, "m");
	/* a usage inside a string of the answer, or nested deeper, is not the usage */
	from_body("{\"choices\":[{\"message\":{\"content\":\"\\\"usage\\\": {\\\"prompt_tokens\\\""
	          ": 999999}\",\"usage\":{\"prompt_tokens\":1}}}],\"model\":\"good\"}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_EQ_STR(u.model, "good");
	/* a stream: a Responses stream's usage only from its terminal event */
	from_body("event: response.created\ndata: {\"type\":\"response.created\",\"response\":"
	          "{\"id\":\"resp_9\",\"model\":\"gpt-5\",\"tools\":[{\"parameters\":{\"usage\":"
	          "{\"input_tokens\":1,\"output_tokens\":1}}}],\"usage\":null,\"metadata\":"
	          "{\"model\":\"cheap\"}}}\n\n", 1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_EQ_STR(u.model, "gpt-5");
	from_body("event: response.created\ndata: {\"type\":\"response.created\",\"response\":"
	          "{\"id\":\"resp_9\",\"model\":\"gpt-5\",\"usage\":null}}\n\n"
	          "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\","
	          "\"item\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"
	          "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":"
	          "{\"id\":\"resp_9\",\"model\":\"gpt-5\",\"tools\":[{\"parameters\":{\"usage\":"
	          "{\"input_tokens\":1}}}],\"usage\":{\"input_tokens\":900,\"output_tokens\":80},"
	          "\"metadata\":{\"model\":\"cheap\"}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 900, 80, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "gpt-5");
	/* an Anthropic-compatible server that writes a space after each colon, and data
	 * over several lines */
	from_body("event: message_start\ndata: {\"type\": \"message_start\", \"message\": "
	          "{\"model\": \"c\", \"usage\": {\"input_tokens\": 10, \"output_tokens\": 1}}}\n\n"
	          "event: message_delta\ndata: {\"type\": \"message_delta\",\ndata:  \"usage\": "
	          "{\"output_tokens\": 42}}\n\n", 1, &u);
	CHECK_COUNTS(u, 10, 42, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "c");
}

/* Echoed client text of any length before and after the usage changes nothing. */
static void test_echo_any_length(void)
{
	static const size_t pads[] = { 0, 1500, 5000, 40000 };
	size_t i, n;
	struct usage u;

	for (i = 0; i < sizeof(pads) / sizeof(pads[0]); i++) {
		char *body = malloc(2 * pads[i] + 512), *p = body;

		p += sprintf(p, "{\"instructions\":\"");
		for (n = 0; n < pads[i]; n++)
			*p++ = n % 50 ? 'a' : ' ';
		p += sprintf(p, "\",\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":70,"
		             "\"output_tokens\":30},\"metadata\":{\"k\":\"");
		for (n = 0; n < pads[i]; n++)
			*p++ = 'b';
		p += sprintf(p, "\",\"usage\":\"{\\\"input_tokens\\\":1}\"}}");
		from_body(body, 0, &u);
		CHECK_COUNTS(u, 70, 30, N, N, N);
		CHECK_EQ_STR(u.model, "gpt-5");
		free(body);
	}
}

static void test_openai_compatible_servers(void)
{
	struct usage u;

	/* vLLM: usage in the final chunk, prompt_tokens_details null */
	from_body("data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,"
	          "\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,\"delta\":"
	          "{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
	          "data: {\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1,"
	          "\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\"usage\":"
	          "{\"prompt_tokens\":17,\"total_tokens\":27,\"completion_tokens\":10,"
	          "\"prompt_tokens_details\":null}}\n\ndata: [DONE]\n\n", 1, &u);
	CHECK_COUNTS(u, 17, 10, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "meta-llama/Llama-3.1-8B-Instruct");
	/* vLLM continuous_usage_stats: every chunk counts so far; the last is final */
	from_body("data: {\"model\":\"qwen\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":"
	          "{\"prompt_tokens\":17,\"total_tokens\":18,\"completion_tokens\":1}}\n\n"
	          "data: {\"model\":\"qwen\",\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":"
	          "{\"prompt_tokens\":17,\"total_tokens\":19,\"completion_tokens\":2}}\n\n"
	          "data: {\"model\":\"qwen\",\"choices\":[],\"usage\":{\"prompt_tokens\":17,"
	          "\"total_tokens\":20,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n", 1, &u);
	CHECK_COUNTS(u, 17, 3, N, N, N);
	/* llama.cpp: choices before the model, "timings" after the usage */
	from_body("{\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"message\":{\"role\":"
	          "\"assistant\",\"content\":\"Hello\"}}],\"created\":1741,\"model\":\"gpt-3.5-turbo\","
	          "\"system_fingerprint\":\"b4870-e0dbec0b\",\"object\":\"chat.completion\",\"usage\":"
	          "{\"completion_tokens\":9,\"prompt_tokens\":24,\"total_tokens\":33},\"id\":"
	          "\"chatcmpl-x\",\"timings\":{\"prompt_n\":24,\"prompt_ms\":31.2,\"predicted_n\":9,"
	          "\"predicted_ms\":80.5,\"predicted_per_second\":111.8}}", 0, &u);
	CHECK_COUNTS(u, 24, 9, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_STR(u.model, "gpt-3.5-turbo");
	/* llama.cpp stream: the last chunk has finish_reason, usage and timings */
	from_body("data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":"
	          "\"Hi\"}}],\"created\":1,\"id\":\"c\",\"model\":\"llama\",\"object\":"
	          "\"chat.completion.chunk\"}\n\ndata: {\"choices\":[{\"finish_reason\":\"stop\","
	          "\"index\":0,\"delta\":{}}],\"created\":1,\"id\":\"c\",\"model\":\"llama\",\"object\":"
	          "\"chat.completion.chunk\",\"usage\":{\"completion_tokens\":4,\"prompt_tokens\":11,"
	          "\"total_tokens\":15,\"prompt_tokens_details\":{\"cached_tokens\":8}},\"timings\":"
	          "{\"prompt_n\":3,\"cache_n\":8}}\n\ndata: [DONE]\n\n", 1, &u);
	CHECK_COUNTS(u, 11, 4, 8, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* Ollama /v1: its final chunk */
	from_body("data: {\"id\":\"chatcmpl-415\",\"object\":\"chat.completion.chunk\",\"created\":"
	          "1741,\"model\":\"llama3.2\",\"system_fingerprint\":\"fp_ollama\",\"choices\":[{"
	          "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":"
	          "\"stop\"}]}\n\ndata: {\"id\":\"chatcmpl-415\",\"object\":\"chat.completion.chunk\","
	          "\"created\":1741,\"model\":\"llama3.2\",\"system_fingerprint\":\"fp_ollama\","
	          "\"choices\":[],\"usage\":{\"prompt_tokens\":26,\"completion_tokens\":10,"
	          "\"total_tokens\":36}}\n\ndata: [DONE]\n\n", 1, &u);
	CHECK_COUNTS(u, 26, 10, N, N, N);
	CHECK_EQ_STR(u.model, "llama3.2");
	/* OpenAI Responses API: input_tokens count the cached ones */
	from_body("{\"id\":\"resp_1\",\"object\":\"response\",\"model\":\"gpt-4.1-2025-04-14\","
	          "\"usage\":{\"input_tokens\":328,\"input_tokens_details\":{\"cached_tokens\":128},"
	          "\"output_tokens\":52,\"output_tokens_details\":{\"reasoning_tokens\":20},"
	          "\"total_tokens\":380}}", 0, &u);
	CHECK_COUNTS(u, 328, 52, 128, N, 20);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
}

static void test_model_names(void)
{
	struct usage u;
	char body[512];

	from_body("{\"model\":\"caf\\u00e9-\\\"x\\\"\",\"usage\":{\"prompt_tokens\":1}}", 0, &u);
	CHECK_EQ_STR(u.model, "caf\xc3\xa9-\"x\"");
	/* embeddings: no completion */
	CHECK_COUNTS(u, 1, N, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	/* a name that cannot be stored is no name; a nested "model" is never the model */
	from_body("{\"model\":\"a\\u0000b\",\"x\":{\"model\":\"b\"}}", 0, &u);
	CHECK_EQ_STR(u.model, "");
	from_body("{\"model\":\"a\\nb\"}", 0, &u);
	CHECK_EQ_STR(u.model, "");
	/* duplicates: the first is the model, as JSON readers take it */
	from_body("{\"model\":\"\",\"model\":\"ok\"}", 0, &u);
	CHECK_EQ_STR(u.model, "");
	from_body("{\"model\":\"ok\",\"model\":5,\"model\":{\"a\":1},\"model\":null}", 0, &u);
	CHECK_EQ_STR(u.model, "ok");
	from_body("{\"model\" : \"spaced\"}", 0, &u);
	CHECK_EQ_STR(u.model, "spaced");
	from_body("{\"model\":\"unterminated", 0, &u);
	CHECK_EQ_STR(u.model, "");
	memset(body, 0, sizeof(body));
	memcpy(body, "{\"model\":\"", 10);
	memset(body + 10, 'm', ACCT_NAME_MAX);
	memcpy(body + 10 + ACCT_NAME_MAX, "\"}", 2);
	from_body(body, 0, &u);
	CHECK_EQ_STR(u.model, "");
	memcpy(body + 10 + ACCT_NAME_MAX - 1, "\"}", 3);
	from_body(body, 0, &u);
	CHECK_EQ_INT(strlen(u.model), ACCT_NAME_MAX - 1);
	/* a body that is no JSON object names no model */
	from_body("{\"model\":\"first\"\"model\":\"second\"}", 0, &u);
	CHECK_EQ_STR(u.model, "");
	from_body("[{\"model\":\"second\"}]", 0, &u);
	CHECK_EQ_STR(u.model, "");
}

static void test_counts_absent_or_bad(void)
{
	struct usage u;

	from_body("{\"usage\":{}}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	from_body("{\"usage\":{\"total_tokens\":5}}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	from_body("{\"usage\":null}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	from_body("{\"usage\":[1,2]}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	from_body("{\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0}}", 0, &u);
	CHECK_COUNTS(u, 0, 0, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	/* huge, negative, fractional, not numbers: not counts */
	from_body("{\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":-5,"
	          "\"prompt_tokens_details\":{\"cached_tokens\":1.5},"
	          "\"completion_tokens_details\":{\"reasoning_tokens\":\"7\"}}}", 0, &u);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	from_body("{\"usage\":{\"prompt_tokens\":9007199254740992,\"completion_tokens\":"
	          "9007199254740991}}", 0, &u);
	CHECK_COUNTS(u, N, 9007199254740991LL, N, N, N);
	from_body("{\"usage\":{\"prompt_tokens\":true,\"completion_tokens\":null}}", 0, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	from_body("{\"usage\":{\"prompt_tokens\":-0,\"completion_tokens\":1e3}}", 0, &u);
	CHECK_COUNTS(u, 0, 1000, N, N, N);
	from_body("{\"usage\":{\"prompt_tokens\":1e999,\"completion_tokens\":-1e999}}", 0, &u);
	CHECK_COUNTS(u, N, N, N, N, N);
	/* Anthropic's sum stays exact at the largest counts */
	from_body("{\"usage\":{\"input_tokens\":9007199254740991,\"cache_read_input_tokens\":"
	          "9007199254740991,\"cache_creation_input_tokens\":9007199254740991,"
	          "\"output_tokens\":-1}}", 0, &u);
	CHECK_EQ_INT(u.prompt_tokens, 3 * 9007199254740991LL);
	CHECK_EQ_INT(u.completion_tokens, N);
	/* Anthropic without input_tokens: the total is not known */
	from_body("{\"usage\":{\"cache_read_input_tokens\":5,\"output_tokens\":2}}", 0, &u);
	CHECK_COUNTS(u, N, 2, 5, N, N);
	/* a broken usage object is no usage, whatever follows it */
	from_body("{\"usage\":{\"prompt_tokens\":1,,},\"usage\":{\"prompt_tokens\":2}}", 0, &u);
	CHECK_EQ_INT(u.prompt_tokens, N);
}

/* The classes priced apart, where each provider reports them, and the tier. */
static void test_priced_classes(void)
{
	struct usage u;

	from_body("{\"id\":\"c\",\"model\":\"gpt-4o\",\"service_tier\":\"priority\",\"choices\":[],"
	          "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":50,\"prompt_tokens_details\":"
	          "{\"cached_tokens\":10,\"audio_tokens\":20,\"cache_write_tokens\":5},"
	          "\"completion_tokens_details\":{\"reasoning_tokens\":4,\"audio_tokens\":6,"
	          "\"accepted_prediction_tokens\":7,\"rejected_prediction_tokens\":8}}}", 0, &u);
	CHECK_COUNTS(u, 100, 50, 10, 5, 4);
	CHECK(u.audio_input_tokens == 20 && u.audio_output_tokens == 6);
	CHECK(u.accepted_prediction_tokens == 7 && u.rejected_prediction_tokens == 8);
	CHECK_EQ_STR(u.service_tier, "priority");
	/* A chat stream: the tier of the first chunk's own object, never of the text. */
	from_body("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"\\\"service_tier\\\":"
	          "\\\"flex\\\"\"}}],\"service_tier\":\"default\"}\n\ndata: {\"choices\":[],\"usage\":"
	          "{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]  ", 1, &u);
	CHECK_COUNTS(u, 3, 4, N, N, N);
	CHECK_EQ_STR(u.service_tier, "default");
	/* Anthropic: 1h writes, web searches and the tier inside usage. */
	from_body("{\"type\":\"message\",\"model\":\"claude\",\"usage\":{\"input_tokens\":10,"
	          "\"cache_creation_input_tokens\":30,\"cache_read_input_tokens\":20,"
	          "\"cache_creation\":{\"ephemeral_5m_input_tokens\":18,\"ephemeral_1h_input_tokens\":12},"
	          "\"output_tokens\":5,\"server_tool_use\":{\"web_search_requests\":3},"
	          "\"service_tier\":\"standard\"}}", 0, &u);
	CHECK_COUNTS(u, 60, 5, 20, 30, N);
	CHECK(u.cache_creation_1h_tokens == 12 && u.web_search_calls == 3);
	CHECK_EQ_STR(u.service_tier, "standard");
	/* Its stream: the input side in message_start, the searches in the last delta. */
	from_body("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
	          "{\"input_tokens\":10,\"cache_creation_input_tokens\":30,\"cache_creation\":"
	          "{\"ephemeral_1h_input_tokens\":30},\"output_tokens\":1,\"service_tier\":\"priority\"}}}\n\n"
	          "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9,"
	          "\"server_tool_use\":{\"web_search_requests\":2}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 40, 9, N, 30, N);
	CHECK(u.cache_creation_1h_tokens == 30 && u.web_search_calls == 2);
	CHECK_EQ_STR(u.service_tier, "priority");
	/* The Responses API: cache writes among the input details, the tier in the
	 * response object of response.created. */
	from_body("data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\","
	          "\"service_tier\":\"flex\",\"usage\":null}}\n\ndata: {\"type\":\"response.completed\","
	          "\"response\":{\"usage\":{\"input_tokens\":9,\"input_tokens_details\":"
	          "{\"cached_tokens\":2,\"cache_write_tokens\":3},\"output_tokens\":4}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 9, 4, 2, 3, N);
	CHECK_EQ_STR(u.service_tier, "flex");
	/* Anthropic's last delta repeats the input counts, not the tier. */
	from_body("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
	          "{\"input_tokens\":10,\"output_tokens\":1,\"service_tier\":\"priority\"}}}\n\n"
	          "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":10,"
	          "\"output_tokens\":9}}\n\n", 1, &u);
	CHECK_COUNTS(u, 10, 9, N, N, N);
	CHECK_EQ_STR(u.service_tier, "priority");
	/* A long chat answer names its tier after its usage, in the tail. */
	from_parts("{\"id\":\"c\",\"model\":\"gpt-4o\",\"choices\":[{\"message\":{\"content\":\"xx",
	           "xx\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6},"
	           "\"service_tier\":\"priority\",\"system_fingerprint\":null}", 0, &u);
	CHECK_COUNTS(u, 5, 6, N, N, N);
	CHECK_EQ_STR(u.service_tier, "priority");
	/* A Responses stream: the tier served is the terminal event's; "auto" in
	 * response.created only echoes the request. */
	from_body("data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\","
	          "\"service_tier\":\"auto\",\"usage\":null}}\n\ndata: {\"type\":\"response.completed\","
	          "\"response\":{\"id\":\"resp_1\",\"service_tier\":\"priority\",\"tools\":[],"
	          "\"usage\":{\"input_tokens\":9,\"output_tokens\":4},\"metadata\":"
	          "{\"service_tier\":\"flex\"}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 9, 4, N, N, N);
	CHECK_EQ_STR(u.service_tier, "priority");
	from_body("data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\","
	          "\"service_tier\":\"auto\"}}\n\ndata: {\"type\":\"response.completed\",\"response\":"
	          "{\"usage\":{\"input_tokens\":9,\"output_tokens\":4}}}\n\n", 1, &u);
	CHECK_EQ_STR(u.service_tier, "");
	/* A Responses stream cut before its terminal event: a usage object a tool's schema
	 * put in response.created is no usage, nor is one followed by other events. */
	from_body("data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"tools\":"
	          "[{\"type\":\"function\",\"parameters\":{\"usage\":{\"input_tokens\":1,"
	          "\"output_tokens\":1}}}],\"usage\":null}}\n\ndata: {\"type\":\"response.output_text."
	          "delta\",\"delta\":\"hi\"}\n\n", 1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	from_body("data: {\"type\":\"response.created\",\"response\":{\"tools\":[{\"x\":{\"usage\":"
	          "{\"input_tokens\":1,\"output_tokens\":1}}}]}}\n\n", 1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	/* The same echo in the terminal event, before the real usage, changes nothing. */
	from_body("data: {\"type\":\"response.created\",\"response\":{}}\n\ndata: {\"type\":"
	          "\"response.completed\",\"response\":{\"tools\":[{\"x\":{\"usage\":{\"input_tokens\":1,"
	          "\"output_tokens\":1}}}],\"usage\":{\"input_tokens\":700,\"output_tokens\":80}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 700, 80, N, N, N);
	/* A terminal event whose start was not kept (a long answer): its usage in the tail. */
	from_parts("data: {\"type\":\"response.created\",\"response\":{}}\n\ndata: {\"type\":"
	           "\"response.in_progress\",\"response\":{}}\n\ndata: {\"type\":\"response.completed\","
	           "\"response\":{\"output\":[{\"text\":\"xx", "xx\"}],\"usage\":{\"input_tokens\":7,"
	           "\"output_tokens\":8}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 7, 8, N, N, N);
	/* Codex's streams: a response.completed longer than an event is held whole. */
	{
		char head[2048];

		snprintf(head, sizeof(head), "event: response.completed\ndata: {\"type\":"
		         "\"response.completed\",\"response\":{\"instructions\":\"%01500d", 0);
		from_parts(head, "x\",\"tools\":[],\"usage\":{\"input_tokens\":7,\"output_tokens\":8},"
		           "\"user\":null,\"metadata\":{}}}\n\n", 1, &u);
		CHECK_COUNTS(u, 7, 8, N, N, N);
		CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	}
	/* The schema's usage in the last event kept (response.in_progress repeats the tools
	 * and the client left): no usage. */
	from_body("data: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\ndata: "
	          "{\"type\":\"response.in_progress\",\"response\":{\"tools\":[{\"parameters\":"
	          "{\"usage\":{\"input_tokens\":1,\"output_tokens\":1},\"x\":1}}],\"usage\":null}}\n\n",
	          1, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	/* Tools named after Anthropic's events make no usage the input side, nor give a
	 * tier. */
	from_body("data: {\"type\":\"response.created\",\"response\":{}}\n\ndata: {\"type\":"
	          "\"response.completed\",\"response\":{\"tools\":[{\"name\":\"message_start\","
	          "\"parameters\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1,\"service_tier\":"
	          "\"flex\"}}},{\"name\":\"message_delta\"}],\"usage\":{\"input_tokens\":90,"
	          "\"output_tokens\":30},\"user\":null}}\n\n", 1, &u);
	CHECK_COUNTS(u, 90, 30, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.service_tier, "");
	/* A tier that is no plain name is not reported. */
	from_body("{\"service_tier\":\"Pri ority\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
	          0, &u);
	CHECK_EQ_STR(u.service_tier, "");
}

/* The same classes from json_query's fields (tally.cfg): a Responses answer's cache
 * writes are part of its input, an Anthropic one's are not. */
/* Each API's members as usage.h's table places them, and no other API's: what
 * tally.cfg's json_query lines read of a unary answer (tests/test_contract.py). */
static void test_members_of_each_dialect(void)
{
	struct usage u;

	/* Anthropic reports no reasoning count; a member of that name is not one. */
	from_body("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
	          "{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: "
	          "{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5,"
	          "\"output_tokens_details\":{\"reasoning_tokens\":4}}}\n\n", 1, &u);
	CHECK_COUNTS(u, 10, 5, N, N, N);
	/* Details make it the Responses API's, whose server_tool_use is no member. */
	from_body("{\"object\":\"response\",\"usage\":{\"input_tokens\":10,\"output_tokens\":5,"
	          "\"output_tokens_details\":{\"reasoning_tokens\":4},"
	          "\"server_tool_use\":{\"web_search_requests\":3}}}", 0, &u);
	CHECK_COUNTS(u, 10, 5, N, N, 4);
	CHECK(u.web_search_calls == N);
	/* Its top-level tier counts; Anthropic's is inside usage only. */
	from_body("{\"object\":\"response\",\"service_tier\":\"flex\",\"usage\":{\"input_tokens\":1,"
	          "\"output_tokens\":2,\"input_tokens_details\":{\"cached_tokens\":0}}}", 0, &u);
	CHECK_EQ_STR(u.service_tier, "flex");
	from_body("{\"type\":\"message\",\"service_tier\":\"flex\",\"usage\":{\"input_tokens\":1,"
	          "\"output_tokens\":2}}", 0, &u);
	CHECK_EQ_STR(u.service_tier, "");
}

static void test_priced_fields(void)
{
	struct record r;
	struct usage u;
	int i;

	memset(&r, 0, sizeof(r));
	for (i = 0; i < RECORD_U_COUNT; i++)
		r.u[i] = ACCT_NONE;
	r.u[RECORD_U_INPUT] = 900;
	r.u[RECORD_U_OUTPUT] = 300;
	r.u[RECORD_U_CACHED] = 100;
	r.u[RECORD_U_CACHE_CREATION] = 40;
	r.u_tier = (struct record_str){ "flex", 4 };
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 900, 300, 100, 40, N);
	CHECK_EQ_STR(u.service_tier, "flex");
	r.u[RECORD_U_CACHED] = ACCT_NONE;
	r.u[RECORD_U_CACHE_READ] = 100;
	r.u[RECORD_U_CACHE_1H] = 10;
	r.u[RECORD_U_WEB_SEARCH] = 2;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 1040, 300, 100, 40, N);
	CHECK(u.cache_creation_1h_tokens == 10 && u.web_search_calls == 2);
	/* OpenAI chat: its cache writes in the same field, audio and predictions. */
	for (i = 0; i < RECORD_U_COUNT; i++)
		r.u[i] = ACCT_NONE;
	r.u[RECORD_U_PROMPT] = 50;
	r.u[RECORD_U_COMPLETION] = 20;
	r.u[RECORD_U_CACHE_CREATION] = 5;
	r.u[RECORD_U_AUDIO_INPUT] = 6;
	r.u[RECORD_U_AUDIO_OUTPUT] = 7;
	r.u[RECORD_U_PREDICTION_ACCEPTED] = 1;
	r.u[RECORD_U_PREDICTION_REJECTED] = 2;
	r.u_tier = (struct record_str){ NULL, 0 };
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 50, 20, N, 5, N);
	CHECK(u.audio_input_tokens == 6 && u.audio_output_tokens == 7);
	CHECK(u.accepted_prediction_tokens == 1 && u.rejected_prediction_tokens == 2);
	CHECK_EQ_STR(u.service_tier, "");
}

static void test_from_fields(void)
{
	struct record r;
	struct usage u;
	int i;

	memset(&r, 0, sizeof(r));
	for (i = 0; i < RECORD_U_COUNT; i++)
		r.u[i] = ACCT_NONE;
	usage_from_fields(&r, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_STR(u.model, "");

	snprintf(r.u_model, sizeof(r.u_model), "gpt-4o-2024-08-06");
	r.u[RECORD_U_PROMPT] = 1000;
	r.u[RECORD_U_COMPLETION] = 500;
	r.u[RECORD_U_CACHED] = 200;
	r.u[RECORD_U_REASONING] = 50;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 1000, 500, 200, N, 50);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_STR(u.model, "gpt-4o-2024-08-06");

	/* Anthropic's fields (tally.cfg reads them when OpenAI's are absent), summed */
	for (i = 0; i < RECORD_U_COUNT; i++)
		r.u[i] = ACCT_NONE;
	r.u[RECORD_U_INPUT] = 100;
	r.u[RECORD_U_OUTPUT] = 40;
	r.u[RECORD_U_CACHE_READ] = 1000;
	r.u[RECORD_U_CACHE_CREATION] = 2000;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 3100, 40, 1000, 2000, N);
	r.u[RECORD_U_INPUT] = ACCT_NONE;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, N, 40, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);

	/* The Responses API's: input and output with OpenAI's cached and reasoning fields;
	 * its input counts the cached tokens already */
	for (i = 0; i < RECORD_U_COUNT; i++)
		r.u[i] = ACCT_NONE;
	r.u[RECORD_U_INPUT] = 1000;
	r.u[RECORD_U_OUTPUT] = 500;
	r.u[RECORD_U_CACHED] = 200;
	r.u[RECORD_U_REASONING] = 50;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 1000, 500, 200, N, 50);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	r.u[RECORD_U_PROMPT] = 1000;
	r.u[RECORD_U_COMPLETION] = 500;

	/* out of range (a caller that did not bound them): no count, no overflow */
	r.u[RECORD_U_INPUT] = INT64_MAX;
	r.u[RECORD_U_CACHE_READ] = INT64_MAX;
	r.u[RECORD_U_CACHE_CREATION] = INT64_MAX;
	r.u[RECORD_U_OUTPUT] = -7;
	usage_from_fields(&r, &u);
	CHECK_COUNTS(u, 1000, 500, 200, N, 50);
	r.u[RECORD_U_PROMPT] = -2;
	r.u[RECORD_U_COMPLETION] = 9007199254740992LL;
	usage_from_fields(&r, &u);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
}

static void test_real_records(void)
{
	struct usage u;

	CHECK_EQ_INT(from_record(REAL_OPENAI_UNARY, &u), 0);
	CHECK_COUNTS(u, 1000, 500, 200, N, 50);
	CHECK_EQ_INT(u.source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_UNARY, &u), 0);
	CHECK_COUNTS(u, 100, 20, N, N, N);
	CHECK_EQ_STR(u.model, "mock-claude");
	CHECK_EQ_INT(from_record(REAL_OPENAI_STREAM, &u), 0);
	CHECK_COUNTS(u, 12, 3, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "mock-gpt");
	CHECK_EQ_INT(from_record(REAL_OPENAI_STREAM_CRLF, &u), 0);
	CHECK_COUNTS(u, 12, 3, 4, N, 2);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	/* it used to lose this usage: the record's byte count said "gap" */
	CHECK_EQ_INT(from_record(REAL_OPENAI_STREAM_SEAM, &u), 0);
	CHECK_COUNTS(u, 12, 20, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_STR(u.model, "mock-gpt-xxxxxxxxxxxx");
	CHECK_EQ_INT(from_record(REAL_OPENAI_LONG_STREAM, &u), 0);
	CHECK_COUNTS(u, 12, 200, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_STREAM, &u), 0);
	CHECK_COUNTS(u, 3100, 40, 1000, 2000, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_LONG_STREAM_CRLF, &u), 0);
	CHECK_COUNTS(u, 100, 200, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_STREAM);
}

static void test_real_records_cut(void)
{
	struct usage u;

	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_CUT, &u), 0);
	CHECK_COUNTS(u, 107, N, 7, 0, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_PARTIAL);
	CHECK_EQ_STR(u.model, "mock-claude");
	/* long enough for a gap: it used to read message_start's output_tokens 1 as the
	 * output and call the stream whole */
	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_CUT_LONG, &u), 0);
	CHECK_COUNTS(u, 100, N, N, N, N);
	CHECK_EQ_INT(u.source, ACCT_USAGE_PARTIAL);
	/* no capture at all: nothing to read */
	CHECK_EQ_INT(from_record(REAL_ANTHROPIC_CUT_NO_CAPTURE, &u), 0);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	/* a client gone mid-OpenAI-stream keeps the model the upstream named */
	CHECK_EQ_INT(from_record(REAL_OPENAI_CLIENT_ABORT, &u), 0);
	CHECK_EQ_INT(u.source, ACCT_USAGE_NONE);
	CHECK_COUNTS(u, N, N, N, N, N);
	CHECK_EQ_STR(u.model, "mock-gpt");
}

static const char *resp_id(const char *body, int sse)
{
	static char out[ACCT_RESPONSE_ID_MAX];
	const char *f = field_of(body, strlen(body), 0, sse), *sum = f ? luacap_summary(f) : NULL;

	usage_response_id(sum, sum ? strlen(sum) : 0, sse, out, sizeof(out));
	return out;
}

/* A stored response's id is read by the answer's structure, never searched for. */
static void test_response_id(void)
{
	/* unary: the top-level id, whatever precedes it */
	CHECK_EQ_STR(resp_id("{\"id\":\"resp_1\",\"object\":\"response\"}", 0), "resp_1");
	CHECK_EQ_STR(resp_id(" { \"object\" : \"response\", \"meta\": {\"id\": \"resp_in\"},"
	                     " \"x\": [1, {\"id\": \"resp_arr\"}, \"]}\\\"\"], \"id\" : \"resp_2\" }", 0),
	             "resp_2");
	/* the model's words are no id: text, or an id past the head, or none */
	CHECK_EQ_STR(resp_id("{\"output\":\"\\\"id\\\":\\\"resp_fake\\\"\",\"status\":\"completed\"}", 0), "");
	CHECK_EQ_STR(resp_id("{\"output\":[{\"text\":\"id\"},{\"id\":\"msg_1\"}],\"object\":\"resp", 0), "");
	CHECK_EQ_STR(resp_id("{\"id\":12}", 0), "");
	CHECK_EQ_STR(resp_id("{\"id\":\"resp 1\"}", 0), "");
	CHECK_EQ_STR(resp_id("{\"id\":\"resp_\\u0041\"}", 0), "resp_A");
	CHECK_EQ_STR(resp_id("{\"id\":\"resp_cut", 0), "");
	CHECK_EQ_STR(resp_id("[{\"id\":\"resp_1\"}]", 0), "");
	/* a stream: the response of its first event, response.created */
	CHECK_EQ_STR(resp_id("event: response.created\ndata: {\"type\":\"response.created\","
	                     "\"sequence_number\":0,\"response\":{\"id\":\"resp_s\",\"object\":"
	                     "\"response\"}}\n\nevent: response.in_progress\n", 1), "resp_s");
	CHECK_EQ_STR(resp_id("data: {\"response\":{\"status\":\"in_progress\",\"id\":\"resp_t\"},"
	                     "\"type\":\"response.created\"}", 1), "resp_t");
	CHECK_EQ_STR(resp_id("data: {\"type\":\"response.output_text.delta\",\"response\":"
	                     "{\"id\":\"resp_u\"}}", 1), "");
	CHECK_EQ_STR(resp_id("data: {\"type\":\"response.created\",\"delta\":\"{\\\"response\\\":"
	                     "{\\\"id\\\":\\\"resp_v\\\"}}\"}", 1), "");
	CHECK_EQ_STR(resp_id("event: response.created", 1), "");
	CHECK_EQ_STR(resp_id("{\"id\":", 0), "");
	CHECK_EQ_STR(resp_id("{\"a\":\"\\", 0), "");
	CHECK_EQ_STR(resp_id("", 1), "");
	usage_response_id(NULL, 0, 0, (char[8]){ 'x' }, 8);
}

int main(void)
{
	RUN(test_openai_unary);
	RUN(test_openai_stream);
	RUN(test_anthropic_unary);
	RUN(test_anthropic_stream);
	RUN(test_anthropic_stream_cut);
	RUN(test_structure_only);
	RUN(test_echo_any_length);
	RUN(test_openai_compatible_servers);
	RUN(test_model_names);
	RUN(test_counts_absent_or_bad);
	RUN(test_priced_classes);
	RUN(test_members_of_each_dialect);
	RUN(test_priced_fields);
	RUN(test_from_fields);
	RUN(test_real_records);
	RUN(test_real_records_cut);
	RUN(test_response_id);
	return UNIT_DONE();
}
