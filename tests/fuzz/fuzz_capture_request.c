/* libFuzzer target: haproxy/capture.lua's scanner of cut request bodies, held to
 * spoa/reqbody.c (differential). Runs the Lua filter in an embedded Lua 5.4 with the
 * stand-in for HAProxy's API (tests/lua/haproxy.lua), both loaded from TALLY_ROOT.
 *
 * Input: 5 header bytes, then a body. flags (header[0]) choose what the agent asks the
 * filter to judge past the cut (the key's allow-list, costly tools, tiers, stored state,
 * the stream amendment) and whether the body is the rest of the input as it is or one
 * generated from it (members in any order and spelling, duplicated, escaped, white
 * space anywhere, long padding). header[1..2] place the cut, header[3..4] two more
 * chunk boundaries after it.
 *
 * Per body: reqbody_inspect judges the prefix before the cut as the agent does
 * (spoa/decision.c); a prefix it refuses, or that is no cut object, is not scanned. The
 * txn.tally.* variables are set as session.c would, and the body goes through the
 * filter in chunks. Then, held to reqbody_inspect and cJSON on the WHOLE body:
 *   - the body keeps the length HAProxy announced (its own plus the amendment's);
 *   - a body the whole-body rules refuse for a reason the filter owns past the cut (a
 *     judged member twice or in a variant spelling, a model off the allow-list, a tool,
 *     audio or tier the key may not ask for, stored state) is spoiled (a NUL added);
 *   - an acceptable body that is not spoiled reaches the upstream unchanged but for the
 *     amendment: every member as sent, stream_options asking for usage when it is a
 *     stream that did not, the rest byte for byte.
 * The filter may refuse more than reqbody.c (it decodes no escapes, judges no value
 * longer than 256 bytes, and refuses stateful members whatever their value): that is
 * not checked. A Lua error or a stalled filter aborts. */
#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reqbody.h"

#ifndef TALLY_ROOT
#define TALLY_ROOT "."
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define F_ALLOW    0x01   /* a restricted key: "gpt-a", "gpt-b" */
#define F_COST_O   0x02   /* no tools the provider runs */
#define F_COST_W   0x04   /* no web searches (implies F_COST_O as decision.c grants) */
#define F_COST_A   0x08   /* no audio output */
#define F_TIERS    0x10   /* tiers "default", "flex" only */
#define F_NOSTATE  0x20   /* a Responses body: no stored state */
#define F_AMEND    0x40   /* an OpenAI chat body: the stream amendment */
#define F_GENERATE 0x80   /* the body is generated from the input */

#define AMEND_TAIL ",\"stream_options\":{\"include_usage\":true}"
#define BODY_MAX 65536
#define BUFSIZE 16384

static lua_State *fz_lua;

/* Lua: the function that runs one body, (vars, body, splits, bufsize) -> output. */
static const char fz_runner[] =
	"local H, Capture = ...\n"
	"return function(vars, body, splits, bufsize)\n"
	"  return (H.feed(Capture, H.txn(vars), body, { splits = splits, bufsize = bufsize }))\n"
	"end\n";

static void fz_lua_fail(const char *what)
{
	fprintf(stderr, "fuzz_capture_request: %s: %s\n", what, lua_tostring(fz_lua, -1));
	abort();
}

static void fz_lua_init(void)
{
	fz_lua = luaL_newstate();
	luaL_openlibs(fz_lua);
	if (luaL_dostring(fz_lua, "package.path = '" TALLY_ROOT "/tests/lua/?.lua;' .. package.path\n"
	                          "local H = require('haproxy')\n"
	                          "return H, H.load_capture('" TALLY_ROOT "/haproxy')"))
		fz_lua_fail("loading scanner.lua and capture.lua");
	if (luaL_loadstring(fz_lua, fz_runner))
		fz_lua_fail("runner");
	lua_insert(fz_lua, -3);     /* the runner below its arguments, H and Capture */
	if (lua_pcall(fz_lua, 2, 1, 0))
		fz_lua_fail("runner");
	lua_setglobal(fz_lua, "fz_run");
}

/* --- generated bodies --- */

struct fz_gen {
	const uint8_t *in;
	size_t n, at;
	char *out;
	size_t len;
};

static unsigned fz_byte(struct fz_gen *g)
{
	return g->at < g->n ? g->in[g->at++] : 0;
}

static void fz_put(struct fz_gen *g, const char *s, size_t n)
{
	if (g->len + n > BODY_MAX)
		n = BODY_MAX - g->len;
	memcpy(g->out + g->len, s, n);
	g->len += n;
}

static void fz_puts(struct fz_gen *g, const char *s)
{
	fz_put(g, s, strlen(s));
}

static void fz_ws(struct fz_gen *g)
{
	static const char *const ws[] = { "", "", "", " ", "\n  ", "\t", " \r\n " };
	unsigned b = fz_byte(g);

	if (b >= 250) {
		size_t i;

		for (i = 0; i < (b - 249) * 40u; i++)
			fz_puts(g, " ");
		return;
	}
	fz_puts(g, ws[b % (sizeof(ws) / sizeof(ws[0]))]);
}

/* A key spelled as every reader takes it, or in a variant some readers take. */
static void fz_key(struct fz_gen *g, const char *name)
{
	unsigned b = fz_byte(g) % 12;
	const char *s = strchr(name, 's'), *k = strchr(name, 'k');
	char buf[96];

	fz_puts(g, "\"");
	if (b == 8) {
		snprintf(buf, sizeof(buf), "%c%s", name[0] - 'a' + 'A', name + 1);
		fz_puts(g, buf);
	} else if (b == 9) {
		snprintf(buf, sizeof(buf), "\\u%04x%s", (unsigned char)name[0], name + 1);
		fz_puts(g, buf);
	} else if (b == 10 && (s || k)) {
		const char *at = s ? s : k;

		fz_put(g, name, (size_t)(at - name));
		fz_puts(g, s ? "\xc5\xbf" : "\xe2\x84\xaa");
		fz_puts(g, at + 1);
	} else if (b == 11) {
		fz_puts(g, name);
		fz_puts(g, "\\u0000");
	} else {
		fz_puts(g, name);
	}
	fz_puts(g, "\"");
}

static void fz_pick(struct fz_gen *g, const char *const *v, size_t n)
{
	fz_puts(g, v[fz_byte(g) % n]);
}

#define FZ_PICK(g, arr) fz_pick(g, arr, sizeof(arr) / sizeof(arr[0]))

static void fz_tools(struct fz_gen *g)
{
	static const char *const tool[] = {
		"{\"type\":\"function\",\"function\":{\"name\":\"f\",\"type\":\"mcp\"}}",
		"{\"type\":\"custom\",\"name\":\"c\"}", "{\"type\":\"web_search_preview\"}",
		"{\"type\":\"web_search_20250305\",\"name\":\"w\"}", "{\"type\":\"file_search\"}",
		"{\"name\":\"m\",\"type\":\"mcp\"}", "{\"type\":\"bash_20250124\"}",
		"{\"type\":\"fil\\u0065_search\"}", "{\"type\":[\"x\"]}", "\"x\"",
		"{\"name\":\"t\",\"input_schema\":{\"type\":\"object\"}}",
		"{\"Type\":\"mcp\",\"type\":\"function\"}", "{ \"type\" : \"computer_use_preview\" }",
		"{\"type\":\"functio\\u006e\"}", "{\"type\":\"code_interpreter\",\"container\":{}}",
	};
	unsigned n = fz_byte(g) % 4, i;

	fz_puts(g, "[");
	for (i = 0; i < n; i++) {
		if (i)
			fz_puts(g, ",");
		fz_ws(g);
		FZ_PICK(g, tool);
	}
	fz_puts(g, "]");
}

static void fz_value(struct fz_gen *g, unsigned member)
{
	static const char *const model[] = { "\"gpt-a\"", "\"gpt-b\"", "\"gpt-c\"", "\"gpt-\\u0061\"",
	                                     "5", "[\"gpt-a\"]", "null", "\"\"" };
	static const char *const stream[] = { "true", "false", "null", "\"true\"", "true" };
	static const char *const options[] = {
		"{\"include_usage\":true}", "{\"include_usage\":false}", "{}", "null",
		"{\"include_usage\":true,\"x\":1}", "{\"include_usage\":true,\"include_usage\":false}",
		"{ \"include_usage\" : true }", "{\"Include_usage\":true}", "[]", "true",
	};
	static const char *const tier[] = { "\"default\"", "\"flex\"", "\"priority\"", "null",
	                                    "\"fl\\u0065x\"", "1", "\"auto\"" };
	static const char *const audio[] = { "null", "{\"voice\":\"alloy\",\"format\":\"wav\"}", "[]" };
	static const char *const modal[] = { "[\"text\"]", "[\"text\",\"audio\"]", "[\"au\\u0064io\"]",
	                                     "null", "\"audio\"", "[ \"text\" ]" };
	static const char *const nullish[] = { "null", "{}", "[]", "\"x\"", "false" };
	static const char *const text[] = {
		"[{\"role\":\"user\",\"content\":\"hi \\\"model\\\":\\\"gpt-c\\\"} {\"}]",
		"[{\"role\":\"user\",\"content\":\"\\\\\"},{\"content\":[{\"type\":\"mcp\"}]}]",
		"{\"model\":\"gpt-c\",\"stream\":true,\"tools\":[{\"type\":\"mcp\"}]}",
		"\"\\u0022model\\u0022:\\\"x\\\"\"", "[\"model\",\"stream\",{\"service_tier\":1}]",
	};
	size_t i, pad;

	switch (member) {
	case 0: FZ_PICK(g, model); break;
	case 1: FZ_PICK(g, stream); break;
	case 2: FZ_PICK(g, options); break;
	case 3: FZ_PICK(g, tier); break;
	case 4: fz_tools(g); break;
	case 5: FZ_PICK(g, audio); break;
	case 6: FZ_PICK(g, modal); break;
	case 16:
		/* Padding that moves what follows past the cut or the buffer. */
		pad = fz_byte(g) * 96u;
		fz_puts(g, "\"");
		for (i = 0; i < pad; i++)
			fz_puts(g, i % 50 == 49 ? "\\\"" : "p");
		fz_puts(g, "\"");
		break;
	case 14:
	case 15:
		FZ_PICK(g, text);
		break;
	case 17: fz_puts(g, "16"); break;
	default: FZ_PICK(g, nullish); break;
	}
}

static size_t fz_generate(const uint8_t *in, size_t n, char *out)
{
	static const char *const names[] = {
		"model", "stream", "stream_options", "service_tier", "tools", "audio",
		"modalities", "web_search_options", "mcp_servers", "previous_response_id",
		"conversation", "background", "request_id", "store", "messages", "metadata",
		"input", "max_tokens",
	};
	struct fz_gen g = { in, n, 0, out, 0 };
	unsigned members = fz_byte(&g) % 10, i;

	fz_ws(&g);
	fz_puts(&g, "{");
	for (i = 0; i < members; i++) {
		unsigned m = fz_byte(&g) % (sizeof(names) / sizeof(names[0]));

		if (i)
			fz_puts(&g, ",");
		fz_ws(&g);
		fz_key(&g, names[m]);
		fz_ws(&g);
		fz_puts(&g, ":");
		fz_ws(&g);
		fz_value(&g, m);
		fz_ws(&g);
	}
	fz_puts(&g, "}");
	fz_ws(&g);
	return g.len;
}

/* --- the oracle --- */

static int fz_in_list(const char *name, const char *const *list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(name, list[i]) == 0)
			return 1;
	return 0;
}

static const char *const fz_allowed[] = { "gpt-a", "gpt-b" };
static const char *const fz_tiers[] = { "default", "flex" };

/* What the agent refuses of a prefix (spoa/decision.c, for the parts the flags set). */
static int fz_prefix_refused(const struct reqbody_info *p, unsigned flags)
{
	if (p->has_model && (p->model_unusable || ((flags & F_ALLOW) &&
	                     !fz_in_list(p->model, fz_allowed, 2))))
		return 1;
	if (p->tier_unknown ||
	    ((flags & F_TIERS) && p->service_tier[0] && !fz_in_list(p->service_tier, fz_tiers, 2)))
		return 1;
	if (((flags & F_COST_O) && (p->server_tools & REQBODY_TOOL_OTHER)) ||
	    ((flags & F_COST_W) && (p->server_tools & REQBODY_TOOL_WEB_SEARCH)) ||
	    ((flags & F_COST_A) && p->audio_out))
		return 1;
	return (flags & F_NOSTATE) && (p->stateful || p->unaccountable);
}

/* A top-level key some reader takes for a judged member (cJSON's decoded key, case and
 * Unicode folds as Go applies them), and whether it is spelled exactly. */
static int fz_judged(const char *key, int *exact)
{
	static const char *const judged[] = { "model", "stream", "stream_options", "service_tier" };
	char folded[64];
	size_t i = 0, o = 0, n = strlen(key);

	while (i < n && o < sizeof(folded) - 1) {
		unsigned char c = (unsigned char)key[i];

		if (n - i >= 2 && c == 0xc5 && (unsigned char)key[i + 1] == 0xbf) {
			folded[o++] = 's';
			i += 2;
		} else if (n - i >= 3 && c == 0xe2 && (unsigned char)key[i + 1] == 0x84 &&
		           (unsigned char)key[i + 2] == 0xaa) {
			folded[o++] = 'k';
			i += 3;
		} else {
			folded[o++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
			i++;
		}
	}
	if (i < n)
		return -1;
	folded[o] = '\0';
	for (i = 0; i < 4; i++)
		if (strcmp(folded, judged[i]) == 0) {
			*exact = strcmp(key, judged[i]) == 0;
			return (int)i;
		}
	return -1;
}

/* A judged member twice or in a variant spelling, as cJSON keeps every member. */
static int fz_judged_ambiguous(const cJSON *root)
{
	int seen[4] = { 0 };
	const cJSON *it;

	cJSON_ArrayForEach(it, root) {
		int exact, m = fz_judged(it->string, &exact);

		if (m >= 0 && (!exact || seen[m]++))
			return 1;
	}
	return 0;
}

/* What the whole-body rules refuse that the filter owns past the cut. */
static const char *fz_must_spoil(const cJSON *root, enum reqbody_status st,
                                 const struct reqbody_info *w, unsigned flags, int allow_scan)
{
	if (fz_judged_ambiguous(root))
		return "a judged member twice or in a variant spelling";
	if (st != REQBODY_COMPLETE)
		return NULL;
	if (allow_scan && (!w->has_model || w->model_unusable || !fz_in_list(w->model, fz_allowed, 2)))
		return "a model off the allow-list";
	if ((flags & F_TIERS) && (w->tier_unknown || (w->service_tier[0] &&
	                                               !fz_in_list(w->service_tier, fz_tiers, 2))))
		return "a tier the key may not ask for";
	if ((flags & F_COST_O) && (w->server_tools & REQBODY_TOOL_OTHER))
		return "a tool the provider runs";
	if ((flags & F_COST_W) && (w->server_tools & REQBODY_TOOL_WEB_SEARCH))
		return "a web search";
	if ((flags & F_COST_A) && w->audio_out)
		return "audio output";
	if ((flags & F_NOSTATE) && (w->stateful || w->unaccountable))
		return "stored state";
	return NULL;
}

static size_t fz_count(const char *s, size_t n, char c)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		k += s[i] == c;
	return k;
}

static void fz_diverged(const char *why, const char *body, size_t len, const char *out, size_t olen)
{
	fprintf(stderr, "fuzz_capture_request: %s\n  body %.*s\n  out  %.*s\n", why, (int)len,
	        body, (int)olen, out);
	abort();
}

/* Whether two values are the same, duplicate keys included in their order
 * (cJSON_Compare looks a key up by name, so an object with a key twice differs from
 * itself). */
static int fz_same(const cJSON *a, const cJSON *b)
{
	char *x = cJSON_PrintUnformatted(a), *y = cJSON_PrintUnformatted(b);
	int same = x && y && strcmp(x, y) == 0;

	if (!x || !y)
		abort();            /* out of memory: not a finding */
	cJSON_free(x);
	cJSON_free(y);
	return same;
}

/* An acceptable body the filter did not spoil: every member as sent but stream_options,
 * which asks for usage when the body is a stream that did not; unchanged stream_options,
 * the bytes are the body's with the amendment or as many spaces before its brace. */
static void fz_check_kept(const cJSON *root, const struct reqbody_info *w, const char *text,
                          const char *body, size_t len, const char *out, size_t olen)
{
	const struct reqbody_stream_options *so = &w->stream_options;
	int asked = so->present && so->whole && so->is_object && so->include_usage == 1;
	int amended = text[0] && w->stream == 1 && !asked;
	cJSON *got = cJSON_ParseWithLengthOpts(out, olen, NULL, 0);
	const cJSON *it, *now, *opts = NULL, *was = NULL;
	size_t close = len;

	if (!got)
		fz_diverged("an acceptable body no longer parses", body, len, out, olen);
	/* Member by member in order (a key other than the judged ones may come twice). */
	now = got->child;
	cJSON_ArrayForEach(it, root) {
		if (strcmp(it->string, "stream_options") == 0) {
			was = it;
			continue;
		}
		while (now && strcmp(now->string, "stream_options") == 0) {
			if (opts)
				fz_diverged("stream_options twice in the body sent", body, len, out, olen);
			opts = now;
			now = now->next;
		}
		if (!now || strcmp(it->string, now->string) != 0 || !fz_same(it, now))
			fz_diverged("a member changed", body, len, out, olen);
		now = now->next;
	}
	for (; now; now = now->next) {
		if (strcmp(now->string, "stream_options") != 0 || opts)
			fz_diverged("members added", body, len, out, olen);
		opts = now;
	}
	if (!opts != !was && !(amended && !was))
		fz_diverged("stream_options added or lost", body, len, out, olen);
	if (amended && !(opts && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(opts, "include_usage"))))
		fz_diverged("a stream that did not ask for usage was not amended", body, len, out, olen);
	if (opts && was && !fz_same(opts, was)) {
		cJSON *plain = cJSON_Parse("{\"include_usage\":true}");
		int ok = text[0] && fz_same(opts, plain);

		cJSON_Delete(plain);
		if (!ok)
			fz_diverged("stream_options changed otherwise than asking for usage", body, len,
			            out, olen);
	} else {
		char *want = malloc(olen);
		size_t tl = strlen(text);

		while (close > 0 && body[close - 1] != '}')
			close--;
		memcpy(want, body, close - 1);
		if (amended)
			memcpy(want + close - 1, text, tl);
		else
			memset(want + close - 1, ' ', tl);
		memcpy(want + close - 1 + tl, body + close - 1, len - close + 1);
		if (memcmp(want, out, olen) != 0)
			fz_diverged("bytes changed beyond the amendment", body, len, out, olen);
		free(want);
	}
	cJSON_Delete(got);
}

/* Runs the Lua filter over body with the variables set; the output into *out. */
static const char *fz_filter(const char *body, size_t len, unsigned flags, int allow_scan,
                             const char *text, const size_t *splits, size_t *olen)
{
	int i;

	lua_getglobal(fz_lua, "fz_run");
	lua_newtable(fz_lua);
	lua_pushinteger(fz_lua, 1);
	lua_setfield(fz_lua, -2, "txn.tally.amend_scan");
	if (text[0]) {
		lua_pushstring(fz_lua, text);
		lua_setfield(fz_lua, -2, "txn.tally.amend_text");
	}
	if (allow_scan) {
		lua_pushstring(fz_lua, "gpt-a\ngpt-b");
		lua_setfield(fz_lua, -2, "txn.tally.allow");
	}
	if (flags & (F_COST_O | F_COST_W | F_COST_A)) {
		char costly[4];
		size_t n = 0;

		if (flags & F_COST_O)
			costly[n++] = 'o';
		if (flags & F_COST_W)
			costly[n++] = 'w';
		if (flags & F_COST_A)
			costly[n++] = 'a';
		lua_pushlstring(fz_lua, costly, n);
		lua_setfield(fz_lua, -2, "txn.tally.costly");
	}
	if (flags & F_TIERS) {
		lua_pushstring(fz_lua, "default\nflex");
		lua_setfield(fz_lua, -2, "txn.tally.tiers");
	}
	if (flags & F_NOSTATE) {
		lua_pushinteger(fz_lua, 1);
		lua_setfield(fz_lua, -2, "txn.tally.nostate");
	}
	lua_pushlstring(fz_lua, body, len);
	lua_newtable(fz_lua);
	for (i = 0; i < 3; i++) {
		lua_pushinteger(fz_lua, (lua_Integer)splits[i]);
		lua_rawseti(fz_lua, -2, i + 1);
	}
	lua_pushinteger(fz_lua, BUFSIZE);
	if (lua_pcall(fz_lua, 4, 1, 0))
		fz_lua_fail("the capture filter failed");
	return lua_tolstring(fz_lua, -1, olen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char body[BODY_MAX];
	struct reqbody_info prefix, whole;
	enum reqbody_status st;
	size_t len, cut, splits[3], olen;
	unsigned flags;
	const char *out, *text = "", *why;
	cJSON *root;
	int allow_scan;

	if (size < 5)
		return 0;
	if (!fz_lua)
		fz_lua_init();
	flags = data[0];
	if (flags & F_COST_W)
		flags |= F_COST_O;
	if (flags & F_GENERATE) {
		len = fz_generate(data + 5, size - 5, body);
	} else {
		len = size - 5 < BODY_MAX ? size - 5 : BODY_MAX;
		memcpy(body, data + 5, len);
	}
	if (len < 2)
		return 0;
	/* The agent saw at most a buffer's worth. */
	cut = 1 + ((size_t)data[1] << 8 | data[2]) % (len - 1);
	if (cut > BUFSIZE)
		cut = BUFSIZE;
	splits[0] = cut;
	splits[1] = cut + (len - cut) * data[3] / 256;
	splits[2] = splits[1] + (len - splits[1]) * data[4] / 256;
	if (reqbody_inspect(body, cut, &prefix) != REQBODY_PREFIX || fz_prefix_refused(&prefix, flags))
		return 0;
	allow_scan = (flags & F_ALLOW) && !prefix.has_model;
	/* decision_amend for a cut body. */
	if ((flags & F_AMEND) && prefix.stream != 0 &&
	    !(prefix.stream == 1 && prefix.stream_options.present && prefix.stream_options.whole &&
	      prefix.stream_options.is_object && prefix.stream_options.include_usage == 1))
		text = AMEND_TAIL;
	out = fz_filter(body, len, flags, allow_scan, text, splits, &olen);
	if (olen != len + strlen(text))
		fz_diverged("the body's length is not the one announced", body, len, out, olen);
	st = reqbody_inspect(body, len, &whole);
	root = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
	if (root && cJSON_IsObject(root)) {
		int spoiled = fz_count(out, olen, '\0') > fz_count(body, len, '\0');

		why = fz_must_spoil(root, st, &whole, flags, allow_scan);
		if (why && !spoiled)
			fz_diverged(why, body, len, out, olen);
		if (!why && !spoiled && st == REQBODY_COMPLETE)
			fz_check_kept(root, &whole, text, body, len, out, olen);
	}
	cJSON_Delete(root);
	lua_pop(fz_lua, 1);
	return 0;
}
