/* Unit tests of reqbody: model, stream and output bounds from whole and truncated
 * request bodies. */
#include <stdlib.h>
#include <string.h>

#include "reqbody.h"
#include "reqrules.h"
#include "unit.h"

static enum reqbody_status inspect(const char *body, struct reqbody_info *info)
{
	return reqbody_inspect(body, strlen(body), info);
}

static void test_complete_bodies(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"model\":\"gpt-4o\",\"stream\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.has_model);
	CHECK_EQ_STR(i.model, "gpt-4o");
	CHECK_EQ_INT(i.stream, 1);

	CHECK_EQ_INT(inspect(" {\"messages\":[{\"model\":\"nested\"}]} \n", &i), REQBODY_COMPLETE);
	CHECK(!i.has_model);
	CHECK_EQ_INT(i.stream, 0);

	CHECK_EQ_INT(inspect("{\"model\":\"a\\u0062c\",\"stream\":null}", &i), REQBODY_COMPLETE);
	CHECK_EQ_STR(i.model, "abc");
	CHECK_EQ_INT(i.stream, 0);
}

static void test_empty_and_invalid(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("", &i), REQBODY_EMPTY);
	CHECK_EQ_INT(reqbody_inspect(NULL, 0, &i), REQBODY_EMPTY);
	CHECK_EQ_INT(inspect(" \r\n\t", &i), REQBODY_EMPTY);
	CHECK_EQ_INT(inspect("[1,2]", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("\"model\"", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"a\",,}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"a\"} trailing", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":42}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream\":\"yes\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("not json at all", &i), REQBODY_INVALID);
	CHECK(!i.has_model);
}

static void test_duplicates_are_invalid(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"model\":\"b\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream\":true,\"stream\":false}", &i), REQBODY_INVALID);
	/* an escaped spelling of the same key is the same key */
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"mod\\u0065l\":\"b\"}", &i), REQBODY_INVALID);
	/* and so in a prefix */
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"mod\\u0065l\":\"b\",\"messages\":[\"xx", &i),
	             REQBODY_INVALID);
}

static void test_parser_differentials(void)
{
	struct reqbody_info i;

	/* Go matches keys case-insensitively, Python does not: neither view may win */
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"MODEL\":\"b\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"Model\":\"b\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"STREAM\":true,\"model\":\"a\"}", &i), REQBODY_INVALID);
	/* Go folds U+017F to s: raw UTF-8 and escaped */
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"\xc5\xbftream\":true}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"\\u017ftream\":true}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"a\",\"\xc5\xbftream\":true,\"x\":\"cut", &i),
	             REQBODY_INVALID);
	/* NUL inside a model name: cJSON-based readers would cut it; nobody matches it */
	CHECK_EQ_INT(inspect("{\"model\":\"gpt-a\\u0000-big\"}", &i), REQBODY_COMPLETE);
	CHECK(i.has_model && i.model_unusable);
	CHECK_EQ_INT(inspect("{\"model\":\"gpt\\n\"}", &i), REQBODY_COMPLETE);
	CHECK(i.model_unusable);
	/* a key holding NUL is a key of its own to Python and Go, "model" to cJSON */
	CHECK_EQ_INT(inspect("{\"model\\u0000\":\"x\",\"model\":\"gpt-a\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"other\\u0000\":\"x\",\"model\":\"gpt-a\"}", &i), REQBODY_INVALID);
	/* a NUL byte is no part of a number */
	CHECK_EQ_INT(reqbody_inspect("{\"a\":1\0}", 8, &i), REQBODY_INVALID);
	/* surrogate pairs decode; lone ones do not */
	CHECK_EQ_INT(inspect("{\"model\":\"\\ud83d\\ude00\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_STR(i.model, "\xf0\x9f\x98\x80");
	CHECK(!i.model_unusable);
	CHECK_EQ_INT(inspect("{\"model\":\"\\ud83d\"}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"\\ud83d", &i), REQBODY_PREFIX);
}

static void test_prefixes(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"model\":\"m1\",\"stream\":false,\"messages\":[{\"content\":\"he", &i),
	             REQBODY_PREFIX);
	CHECK_EQ_STR(i.model, "m1");
	CHECK_EQ_INT(i.stream, 0);

	/* the OpenAI SDK order: model after messages, cut before it */
	CHECK_EQ_INT(inspect("{\"messages\":[{\"role\":\"user\",\"content\":\"}]{\\\"model\\\":", &i),
	             REQBODY_PREFIX);
	CHECK(!i.has_model);
	CHECK_EQ_INT(i.stream, -1);

	/* cut inside the model's value: not seen */
	CHECK_EQ_INT(inspect("{\"model\":\"gpt-4", &i), REQBODY_PREFIX);
	CHECK(!i.has_model);
	/* cut inside a literal */
	CHECK_EQ_INT(inspect("{\"model\":\"x\",\"stream\":tr", &i), REQBODY_PREFIX);
	CHECK_EQ_INT(i.stream, -1);
	CHECK_EQ_INT(inspect("{", &i), REQBODY_PREFIX);
	CHECK_EQ_INT(inspect("{\"a\":{\"b\":[1,{\"c\":\"]}\"}", &i), REQBODY_PREFIX);
	/* a prefix that is already wrong */
	CHECK_EQ_INT(inspect("{\"a\":[1}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"a\" 1", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"model\":\"x\",\"stream\":maybe,", &i), REQBODY_INVALID);
}

static void test_every_cut_of_a_real_body(void)
{
	const char *body = "{\"model\":\"mock-gpt\",\"stream\":true,\"stream_options\":"
	                   "{\"include_usage\":true},\"messages\":[{\"role\":\"user\","
	                   "\"content\":\"say \\\"hi\\\" [ok] {x}\"}],\"max_tokens\":5}";
	size_t len = strlen(body), cut;
	struct reqbody_info i;

	for (cut = 1; cut < len; cut++) {
		enum reqbody_status st = reqbody_inspect(body, cut, &i);

		CHECK_EQ_INT(st, REQBODY_PREFIX);
		if (cut >= strlen("{\"model\":\"mock-gpt\""))
			CHECK(i.has_model && strcmp(i.model, "mock-gpt") == 0);
		else
			CHECK(!i.has_model);
	}
	CHECK_EQ_INT(reqbody_inspect(body, len, &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.stream, 1);
}

static void test_long_model(void)
{
	char body[1024];
	struct reqbody_info i;

	memset(body, 0, sizeof(body));
	strcpy(body, "{\"model\":\"");
	memset(body + strlen(body), 'm', 600);
	strcat(body, "\"}");
	CHECK_EQ_INT(inspect(body, &i), REQBODY_COMPLETE);
	CHECK(i.has_model && i.model_unusable);
}

static void test_no_nul_terminator_needed(void)
{
	struct reqbody_info i;
	char *buf = malloc(16);

	memcpy(buf, "{\"model\":\"abcd\"}", 16);   /* exactly 16 bytes, no NUL */
	CHECK_EQ_INT(reqbody_inspect(buf, 16, &i), REQBODY_COMPLETE);
	CHECK_EQ_STR(i.model, "abcd");
	CHECK_EQ_INT(reqbody_inspect(buf, 12, &i), REQBODY_PREFIX);
	free(buf);
}

static void test_output_bounds(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"model\":\"m\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	CHECK(!i.many_outputs);
	CHECK_EQ_INT(inspect("{\"max_tokens\":300,\"max_completion_tokens\":700,\"n\":1}", &i),
	             REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, 700);
	CHECK(!i.many_outputs);
	/* Not a plain integer, or too long for one: no bound. */
	CHECK_EQ_INT(inspect("{\"max_tokens\":1e3}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	CHECK_EQ_INT(inspect("{\"max_tokens\":-5}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	CHECK_EQ_INT(inspect("{\"max_tokens\":1234567890}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	CHECK_EQ_INT(inspect("{\"max_tokens\":\"9\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	/* Only top-level members count. */
	CHECK_EQ_INT(inspect("{\"tools\":[{\"max_tokens\":5}]}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_tokens, -1);
	CHECK_EQ_INT(inspect("{\"n\":3}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"logprobs\":true,\"top_logprobs\":5}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"logprobs\":false,\"n\":null}", &i), REQBODY_COMPLETE);
	CHECK(!i.many_outputs);
	CHECK_EQ_INT(inspect("{\"max_tokens\":64,\"messages\":[\"cut", &i), REQBODY_PREFIX);
	CHECK_EQ_INT(i.max_tokens, 64);
	CHECK_EQ_INT(inspect("{\"max_tokens\":64,\"model\":1}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(i.max_tokens, -1);
	/* The Responses API's bound is kept apart: a chat upstream ignores it. */
	CHECK_EQ_INT(inspect("{\"max_output_tokens\":900,\"max_tokens\":30}", &i), REQBODY_COMPLETE);
	CHECK(i.max_output_tokens == 900 && i.max_tokens == 30);
	CHECK_EQ_INT(inspect("{\"model\":\"m\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.max_output_tokens, -1);
	CHECK_EQ_INT(inspect("{\"max_output_tokens\":5,\"Max_Output_Tokens\":9000}", &i),
	             REQBODY_COMPLETE);
	CHECK(i.hints_ambiguous);
}

/* previous_response_id and conversation name state stored upstream: seen unless null,
 * and in any spelling some reader takes for them. */
static void test_stored_state(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"model\":\"m\",\"previous_response_id\":\"resp_1\"}", &i),
	             REQBODY_COMPLETE);
	CHECK(i.stateful && !i.stateful_other);
	CHECK_EQ_STR(i.previous_response_id, "resp_1");
	/* only one plain id can be tied to its key */
	CHECK_EQ_INT(inspect("{\"previous_response_id\":\"resp_1\",\"conversation\":\"c\"}", &i),
	             REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other);
	CHECK_EQ_INT(inspect("{\"previous_response_id\":\"resp_\\u0031\"}", &i), REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other && !i.previous_response_id[0]);
	CHECK_EQ_INT(inspect("{\"previous_response_id\":\"r1\",\"previous_response_id\":\"r2\"}", &i),
	             REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other);
	CHECK_EQ_INT(inspect("{\"previous_response_id\":{\"id\":\"r1\"}}", &i), REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other && !i.previous_response_id[0]);
	CHECK_EQ_INT(inspect("{\"previous_response_id\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other);
	CHECK_EQ_INT(inspect("{\"conversation\":{\"id\":\"conv_1\"}}", &i), REQBODY_COMPLETE);
	CHECK(i.stateful && i.stateful_other);
	/* whether the answer is stored at all */
	CHECK_EQ_INT(inspect("{\"store\":false}", &i), REQBODY_COMPLETE);
	CHECK(i.store_off && !i.store_ambiguous);
	CHECK_EQ_INT(inspect("{\"store\":true,\"x\":false}", &i), REQBODY_COMPLETE);
	CHECK(!i.store_off);
	CHECK_EQ_INT(inspect("{\"store\":\"false\"}", &i), REQBODY_COMPLETE);
	CHECK(!i.store_off);
	CHECK_EQ_INT(inspect("{\"store\":false,\"store\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.store_ambiguous);
	CHECK_EQ_INT(inspect("{\"STORE\":true,\"store\":false}", &i), REQBODY_COMPLETE);
	CHECK(i.store_off && i.store_ambiguous);
	/* what cannot be accounted or kept to its key: background work, a chosen id */
	CHECK_EQ_INT(inspect("{\"background\":false,\"request_id\":null}", &i), REQBODY_COMPLETE);
	CHECK(!i.unaccountable);
	CHECK_EQ_INT(inspect("{\"background\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.unaccountable);
	CHECK_EQ_INT(inspect("{\"background\":\"yes\"}", &i), REQBODY_COMPLETE);
	CHECK(i.unaccountable);
	CHECK_EQ_INT(inspect("{\"background\":false,\"Background\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.unaccountable);
	CHECK_EQ_INT(inspect("{\"request_id\":\"resp_victim\"}", &i), REQBODY_COMPLETE);
	CHECK(i.unaccountable);
	CHECK_EQ_INT(inspect("{\"previous_response_id\":null,\"conversation\":null}", &i),
	             REQBODY_COMPLETE);
	CHECK(!i.stateful);
	CHECK_EQ_INT(inspect("{\"Previous_Response_ID\":null}", &i), REQBODY_COMPLETE);
	CHECK(i.stateful);
	CHECK_EQ_INT(inspect("{\"input\":[{\"previous_response_id\":\"r\"}]}", &i), REQBODY_COMPLETE);
	CHECK(!i.stateful);
}

/* A Responses input item_reference names an item stored upstream, in any spelling a
 * reader could take for one; other items, strings and other APIs' inputs do not. */
static void test_item_reference(void)
{
	static const char *const refs[] = {
		"{\"input\":[{\"type\":\"message\",\"content\":\"hi\"},{\"id\":\"msg_1\",\"type\":\"item_reference\"}]}",
		"{\"input\":[{\"type\":\"item\\u005freference\",\"id\":\"msg_1\"}]}",
		"{\"input\":[{\"type\":\"item_reference\\u0000\",\"id\":\"msg_1\"}]}",
		"{\"input\":[{\"type\":\"message\",\"type\":\"item_reference\"}]}",
		"{\"input\":[{\"Type\":\"item_reference\",\"id\":\"msg_1\"}]}",
		"{\"input\":[{\"type\":[\"item_reference\"]}]}",
		"{\"input\":\"hi\",\"Input\":[{\"type\":\"item_reference\"}]}",
		"{\"input\":{\"type\":\"item_reference\",\"id\":\"msg_1\"}}",
	};
	static const char *const plain[] = {
		"{\"input\":\"item_reference\"}",
		"{\"input\":[\"a\",[1,2],{\"type\":\"message\",\"content\":[{\"type\":\"item_reference\"}]}]}",
		"{\"input\":[{\"role\":\"user\",\"content\":\"item_reference\"}]}",
		"{\"messages\":[{\"type\":\"item_reference\"}]}",
		"{\"input\":[{\"type\":\"item_referencex\"}]}",
	};
	struct reqbody_info i;
	size_t k;

	for (k = 0; k < sizeof(refs) / sizeof(refs[0]); k++) {
		CHECK_EQ_INT(inspect(refs[k], &i), REQBODY_COMPLETE);
		CHECK(i.item_reference);
	}
	for (k = 0; k < sizeof(plain) / sizeof(plain[0]); k++) {
		CHECK_EQ_INT(inspect(plain[k], &i), REQBODY_COMPLETE);
		CHECK(!i.item_reference);
	}
	/* seen in a prefix: what came is judged */
	CHECK_EQ_INT(inspect("{\"input\":[{\"type\":\"item_reference\"},{\"type\":\"mes", &i),
	             REQBODY_PREFIX);
	CHECK(i.item_reference);
}

/* Where stream_options and include_usage are, for the amendment. */
static void test_stream_options(void)
{
	const char *body = "{\"stream\":true, \"stream_options\" : {\"a\":[1], \"include_usage\":"
	                   " false }, \"model\":\"m\"}";
	struct reqbody_info i;
	const struct reqbody_stream_options *so = &i.stream_options;

	CHECK_EQ_INT(inspect(body, &i), REQBODY_COMPLETE);
	CHECK(so->present && so->whole && so->is_object && !so->empty);
	CHECK_EQ_INT(so->include_usage, 0);
	CHECK(strncmp(body + so->iu_at, "false", so->iu_len) == 0 && so->iu_len == 5);
	CHECK(strncmp(body + so->value_at, "{\"a\"", 4) == 0);
	CHECK_EQ_INT(body[so->value_at + so->value_len - 1], '}');
	CHECK_EQ_INT(body[so->open_end - 1], '{');

	CHECK_EQ_INT(inspect("{\"stream_options\":{\"include_usage\":true}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(so->include_usage, 1);
	CHECK_EQ_INT(inspect("{\"stream_options\":{}}", &i), REQBODY_COMPLETE);
	CHECK(so->is_object && so->empty && so->include_usage == -1);
	CHECK_EQ_INT(inspect("{\"stream_options\":null}", &i), REQBODY_COMPLETE);
	CHECK(so->present && !so->is_object && so->value_len == 4);
	CHECK_EQ_INT(inspect("{\"model\":\"m\"}", &i), REQBODY_COMPLETE);
	CHECK(!so->present);
	/* Cut inside: present but not whole, its include_usage not settled. */
	CHECK_EQ_INT(inspect("{\"stream_options\":{\"include_usage\":true", &i), REQBODY_PREFIX);
	CHECK(so->present && !so->whole);
	/* Twice, or spelled so that only some readers see it, at either level: invalid. */
	CHECK_EQ_INT(inspect("{\"stream_options\":{},\"stream_options\":{}}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"STREAM_OPTIONS\":{}}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"\u017ftream_options\":{}}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream_options\":{\"include_usage\":true,\"include_usage\":false}}",
	                     &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream_options\":{\"Include_Usage\":true}}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream_options\":{\"include_usage\\u0000\":true}}", &i),
	             REQBODY_INVALID);
	CHECK_EQ_INT(inspect("{\"stream_options\":{\"a\":1,}}", &i), REQBODY_INVALID);
}

/* Hints spelled twice or as only some readers read them: the bound is unknown. */
static void test_ambiguous_hints(void)
{
	struct reqbody_info i;

	CHECK_EQ_INT(inspect("{\"max_tokens\":5,\"max_tokens\":7}", &i), REQBODY_COMPLETE);
	CHECK(i.hints_ambiguous);
	CHECK_EQ_INT(inspect("{\"max_tokens\":5,\"Max_Tokens\":90000}", &i), REQBODY_COMPLETE);
	CHECK(i.hints_ambiguous);
	CHECK_EQ_INT(i.max_tokens, 5);
	CHECK_EQ_INT(inspect("{\"max_tokens\":5,\"max_completion_tokens\":7}", &i), REQBODY_COMPLETE);
	CHECK(!i.hints_ambiguous);
	CHECK_EQ_INT(i.max_tokens, 7);
	CHECK_EQ_INT(inspect("{\"n\":1,\"N\":1}", &i), REQBODY_COMPLETE);
	CHECK(i.hints_ambiguous);
	/* Members that grow the answer. */
	CHECK_EQ_INT(inspect("{\"echo\":true}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"best_of\":3}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"logprobs\":2}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"top_logprobs\":0,\"echo\":false,\"audio\":null,\"best_of\":1}", &i),
	             REQBODY_COMPLETE);
	CHECK(!i.many_outputs);
	CHECK_EQ_INT(inspect("{\"tools\":[{\"type\":\"web_search\"}]}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
	CHECK_EQ_INT(inspect("{\"modalities\":[\"text\",\"audio\"]}", &i), REQBODY_COMPLETE);
	CHECK(i.many_outputs);
}

/* What costs more: the tier, the tools the provider runs, audio output. */
static struct reqbody_info costly(const char *body, enum reqbody_status want)
{
	struct reqbody_info info;

	CHECK_EQ_INT(reqbody_inspect(body, strlen(body), &info), want);
	return info;
}

static void test_costly_members(void)
{
	struct reqbody_info i;

	i = costly("{\"service_tier\":\"flex\"}", REQBODY_COMPLETE);
	CHECK(!strcmp(i.service_tier, "flex") && !i.tier_unknown);
	CHECK(costly("{\"service_tier\":\"fl\\u0065x\"}", REQBODY_COMPLETE).tier_unknown);
	CHECK(costly("{\"service_tier\":1}", REQBODY_COMPLETE).tier_unknown);
	CHECK(costly("{\"service_tier\":\"a\",\"service_tier\":\"a\"}", REQBODY_COMPLETE).tier_unknown);
	CHECK(!costly("{\"service_tier\":null}", REQBODY_COMPLETE).tier_unknown);
	i = costly("{\"tools\":[{\"type\":\"function\",\"function\":{\"parameters\":{\"type\":"
	           "\"web_search\"}}},{\"name\":\"x\"},{\"type\":\"text_editor_20250429\"}]}",
	           REQBODY_COMPLETE);
	CHECK_EQ_INT(i.server_tools, 0);
	i = costly("{\"tools\":[{\"type\":\"web_search_preview\"}]}", REQBODY_COMPLETE);
	CHECK_EQ_INT(i.server_tools, REQBODY_TOOL_WEB_SEARCH);
	i = costly("{\"tools\":[{\"type\":\"web_s\\u0065arch\"},{\"type\":\"file_search\"}]}",
	           REQBODY_COMPLETE);
	CHECK_EQ_INT(i.server_tools, REQBODY_TOOL_WEB_SEARCH | REQBODY_TOOL_OTHER);
	CHECK_EQ_INT(costly("{\"tools\":[{\"TYPE\":\"function\"}]}", REQBODY_COMPLETE).server_tools,
	             REQBODY_TOOL_OTHER);
	CHECK_EQ_INT(costly("{\"tools\":[{\"type\\u0000\":\"web_search_20250305\"}]}",
	                    REQBODY_COMPLETE).server_tools, REQBODY_TOOL_OTHER);
	CHECK_EQ_INT(costly("{\"tools\":[{\"type\":[\"function\"]}]}", REQBODY_COMPLETE).server_tools,
	             REQBODY_TOOL_OTHER);
	CHECK_EQ_INT(costly("{\"tools\":[],\"tools\":[]}", REQBODY_COMPLETE).server_tools,
	             REQBODY_TOOL_OTHER);
	CHECK_EQ_INT(costly("{\"tools\":null}", REQBODY_COMPLETE).server_tools, 0);
	CHECK_EQ_INT(costly("{\"mcp_servers\":[]}", REQBODY_COMPLETE).server_tools, REQBODY_TOOL_OTHER);
	/* Cut inside the tools: what was seen is judged, the rest is the answer's to tell. */
	i = costly("{\"tools\":[{\"type\":\"function\"},{\"type\":\"web_sea", REQBODY_PREFIX);
	CHECK_EQ_INT(i.server_tools, 0);
	i = costly("{\"tools\":[{\"type\":\"code_interpreter\"},{\"ty", REQBODY_PREFIX);
	CHECK_EQ_INT(i.server_tools, REQBODY_TOOL_OTHER);
	CHECK(costly("{\"modalities\":[\"text\",\"audio\"]}", REQBODY_COMPLETE).audio_out);
	CHECK(!costly("{\"modalities\":[\"text\"]}", REQBODY_COMPLETE).audio_out);
	CHECK(costly("{\"modalities\":[\"text\",1]}", REQBODY_COMPLETE).audio_out);
	CHECK(costly("{\"modalities\":\"text\"}", REQBODY_COMPLETE).audio_out);
	CHECK(costly("{\"modalities\":{}}", REQBODY_COMPLETE).audio_out);
	CHECK_EQ_INT(costly("{\"tools\":\"x\"}", REQBODY_COMPLETE).server_tools, REQBODY_TOOL_OTHER);
	CHECK(costly("{\"Modalities\":[]}", REQBODY_COMPLETE).audio_out);
	CHECK(costly("{\"audio\":{}}", REQBODY_COMPLETE).audio_out);
	CHECK(!costly("{\"audio\":null}", REQBODY_COMPLETE).audio_out);
	/* Audio input, at any depth of a whole body, however the name is spelled. */
	CHECK(costly("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\","
	             "\"input_audio\":{\"data\":\"AAAA\",\"format\":\"wav\"}}]}]}",
	             REQBODY_COMPLETE).audio_in);
	CHECK(costly("{\"input\":[{\"content\":[{\"type\":\"INPUT_AUDIO\"}]}]}",
	             REQBODY_COMPLETE).audio_in);
	CHECK(costly("{\"input\":[{\"Input_Audio\":{}}]}", REQBODY_COMPLETE).audio_in);
	CHECK(costly("{\"input\":[{\"content\":[{\"type\":\"input_\\u0061udio\"}]}]}",
	             REQBODY_COMPLETE).audio_in);
	CHECK(!costly("{\"input_audio\":null,\"messages\":[{\"content\":\"\\\"type\\\":"
	              "\\\"input_audio\\\"\"}]}", REQBODY_COMPLETE).audio_in);
	CHECK(!costly("{\"messages\":[{\"content\":[{\"type\":\"text\",\"text\":"
	              "\"input_audio\"}]}]}", REQBODY_COMPLETE).audio_in);
	/* A prefix is not walked (its whole is not known): the capture's to judge. */
	CHECK(!costly("{\"messages\":[{\"content\":[{\"type\":\"input_audio\"}]}", REQBODY_PREFIX)
	      .audio_in);
	/* Malformed JSON inside the tools is still caught by the whole-body check. */
	costly("{\"tools\":[{\"type\":\"function\",}]}", REQBODY_INVALID);
}

/* reqrules.c's lists (which capture.lua holds too) are what reqbody judges by: a list
 * changed on one side only fails here or in tests/test_lua.py. */
/* The end user a body names: the member at its path, whatever surrounds it. */
static void test_end_users(void)
{
	struct reqbody_info i;
	char body[600], id[300];

	CHECK_EQ_INT(inspect("{\"model\":\"m\",\"user\":\"alice\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_OK);
	CHECK_EQ_STR(i.openai_user.id, "alice");
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	CHECK(!i.hints_ambiguous);
	/* safety_identifier wins, before or after user. */
	CHECK_EQ_INT(inspect("{\"safety_identifier\":\"s1\",\"user\":\"u1\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_STR(i.openai_user.id, "s1");
	CHECK_EQ_INT(inspect("{ \"user\" : \"u1\" ,\n \"safety_identifier\" :\t\"s1\" }", &i),
	             REQBODY_COMPLETE);
	CHECK_EQ_STR(i.openai_user.id, "s1");
	/* Decoded as the JSON says; spaces, quotes and letters are ids too. */
	CHECK_EQ_INT(inspect("{\"user\":\"J\\u00f6rg \\\"J\\\" M\\u00fcller\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_OK);
	CHECK_EQ_STR(i.openai_user.id, "J\xc3\xb6rg \"J\" M\xc3\xbcller");
	/* null is none; any other non-string, a control character, NUL, or a second user
	 * is bad. */
	CHECK_EQ_INT(inspect("{\"user\":null}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"user\":5}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":{\"id\":\"x\"}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":\"a\\u0007b\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":\"a\\u0000b\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":\"\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":\"a\",\"user\":\"b\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_STR(i.openai_user.id, "");
	/* Twice is bad whatever outranks it. */
	CHECK_EQ_INT(inspect("{\"safety_identifier\":\"s\",\"user\":\"a\",\"user\":\"b\"}", &i),
	             REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"user\":\"a\",\"user\":\"b\",\"safety_identifier\":\"s\"}", &i),
	             REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	CHECK(!i.hints_ambiguous);
	/* Another spelling is another member to the gateway, the only reader of end users. */
	CHECK_EQ_INT(inspect("{\"User\":\"x\",\"USER\":\"y\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	/* 256 bytes is an id, 257 is not. */
	memset(id, 'x', 257);
	id[256] = '\0';
	snprintf(body, sizeof(body), "{\"user\":\"%s\"}", id);
	CHECK_EQ_INT(inspect(body, &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_OK);
	CHECK_EQ_INT((int)strlen(i.openai_user.id), 256);
	id[256] = 'x';
	id[257] = '\0';
	snprintf(body, sizeof(body), "{\"user\":\"%s\"}", id);
	CHECK_EQ_INT(inspect(body, &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_BAD);
	/* Anthropic's metadata.user_id, at that path only. */
	CHECK_EQ_INT(inspect("{\"metadata\":{\"x\":[1,{\"user_id\":\"deep\"}],\"user_id\":\"u-1\"},"
	                     "\"model\":\"c\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_OK);
	CHECK_EQ_STR(i.anthropic_user.id, "u-1");
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"metadata\":{\"x\":{\"user_id\":\"deep\"}}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"metadata\":{}, \"user_id\":\"top\"}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"metadata\":{\"user_id\":\"a\",\"user_id\":\"b\"}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"metadata\":{\"user_id\":null}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"metadata\":{\"user_id\":\"a\"},\"metadata\":{}}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_BAD);
	CHECK_EQ_INT(inspect("{\"metadata\":null}", &i), REQBODY_COMPLETE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	/* Client content that echoes the members names no end user. */
	CHECK_EQ_INT(inspect("{\"messages\":[{\"role\":\"user\",\"content\":\"\\\"user\\\":\\\"eve\\\"\","
	                     "\"user\":\"eve\",\"metadata\":{\"user_id\":\"eve\"}}]}", &i),
	             REQBODY_COMPLETE);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(i.anthropic_user.state, REQBODY_END_USER_NONE);
	/* A body cut before or inside the member names none. */
	CHECK_EQ_INT(inspect("{\"model\":\"m\",\"messages\":[{\"content\":\"hi\"}],\"user\":\"al", &i),
	             REQBODY_PREFIX);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"user\":\"al\",\"messages\":[", &i), REQBODY_PREFIX);
	CHECK_EQ_STR(i.openai_user.id, "al");
	/* An invalid body names nobody. */
	CHECK_EQ_INT(inspect("{\"user\":\"al\",}", &i), REQBODY_INVALID);
	CHECK_EQ_INT(i.openai_user.state, REQBODY_END_USER_NONE);
	CHECK_EQ_INT(inspect("{\"metadata\":{\"user_id\":\"a\",}}", &i), REQBODY_INVALID);
}

static void test_rules_lists(void)
{
	const struct reqrules_costly *c;
	const char *const *p;
	struct reqbody_info i;
	char b[256];

	for (p = reqrules_judged; *p; p++) {
		snprintf(b, sizeof(b), "{\"%s\":\"a\",\"%s\":\"a\"}", *p, *p);
		CHECK(inspect(b, &i) == REQBODY_INVALID || i.tier_unknown);
	}
	for (c = reqrules_costly; c->member; c++) {
		snprintf(b, sizeof(b), "{\"%s\":[\"audio\"]}", c->member);
		i = costly(b, REQBODY_COMPLETE);
		CHECK(c->letter == 'o' ? (i.server_tools & REQBODY_TOOL_OTHER) != 0 : i.audio_out);
	}
	for (p = reqrules_client_tools; *p; p++) {
		snprintf(b, sizeof(b), "{\"tools\":[{\"type\":\"%s\"}]}", *p);
		CHECK_EQ_INT(costly(b, REQBODY_COMPLETE).server_tools, 0);
	}
	for (p = reqrules_client_tool_prefixes; *p; p++) {
		snprintf(b, sizeof(b), "{\"tools\":[{\"type\":\"%s2025\"}]}", *p);
		CHECK_EQ_INT(costly(b, REQBODY_COMPLETE).server_tools, 0);
		snprintf(b, sizeof(b), "{\"tools\":[{\"type\":\"%s\"}]}", *p);
		CHECK_EQ_INT(costly(b, REQBODY_COMPLETE).server_tools, REQBODY_TOOL_OTHER);
	}
	snprintf(b, sizeof(b), "{\"tools\":[{\"type\":\"%s_2025\"}]}",
	         REQRULES_WEB_SEARCH_PREFIX);
	CHECK_EQ_INT(costly(b, REQBODY_COMPLETE).server_tools, REQBODY_TOOL_WEB_SEARCH);
	for (p = reqrules_stateful; *p; p++) {
		snprintf(b, sizeof(b), "{\"%s\":\"resp_1\"}", *p);
		i = costly(b, REQBODY_COMPLETE);
		CHECK(i.stateful || i.unaccountable);
	}
}

int main(void)
{
	RUN(test_complete_bodies);
	RUN(test_empty_and_invalid);
	RUN(test_duplicates_are_invalid);
	RUN(test_parser_differentials);
	RUN(test_prefixes);
	RUN(test_every_cut_of_a_real_body);
	RUN(test_long_model);
	RUN(test_no_nul_terminator_needed);
	RUN(test_output_bounds);
	RUN(test_stored_state);
	RUN(test_stream_options);
	RUN(test_item_reference);
	RUN(test_ambiguous_hints);
	RUN(test_costly_members);
	RUN(test_end_users);
	RUN(test_rules_lists);
	return UNIT_DONE();
}
