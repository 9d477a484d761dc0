/* reqbody: finds "model", "stream", "stream_options" and the output bounds in a request
 * body (I/O threads, pure).
 *
 * One scanner reads the top-level object strictly (key, colon, value, comma) and skips
 * nested values by tracking strings and brackets, which is enough to know at which
 * depth every key stands. It works on whole bodies and on bodies cut by HAProxy's
 * buffer alike, so both are judged by the same code; a whole body must then also pass
 * cJSON's full validation. Strings are decoded before they are compared, so that an
 * escaped spelling of a key or model name is judged as the upstream will read it. */
#include "reqbody.h"
#include "reqrules.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <string.h>

#include "acct.h"
#include "enduser.h"

#define REQBODY_MAX_DEPTH 512
/* Decoded key bytes kept: U+212A folds 3 bytes to 1, so a key of up to 3 x 22 bytes may
 * fold to the longest name looked for ("max_completion_tokens"). */
#define REQBODY_KEY_MAX   72

enum reqbody_scan { REQBODY_SCAN_OK, REQBODY_SCAN_EOF, REQBODY_SCAN_BAD };

/* The top-level members read. Judged ones (model, stream, stream_options) must be
 * unambiguous or the body is invalid; hints only steer the capture path. */
enum reqbody_member {
	REQBODY_OTHER, REQBODY_MODEL, REQBODY_STREAM, REQBODY_STREAM_OPTIONS,
	REQBODY_MAX_TOKENS, REQBODY_MAX_COMPLETION_TOKENS, REQBODY_MAX_OUTPUT_TOKENS,
	REQBODY_N, REQBODY_BEST_OF,
	REQBODY_LOGPROBS, REQBODY_TOP_LOGPROBS, REQBODY_ECHO, REQBODY_AUDIO,
	REQBODY_MODALITIES, REQBODY_TOOLS, REQBODY_WEB_SEARCH, REQBODY_MCP_SERVERS,
	REQBODY_PREVIOUS_RESPONSE_ID, REQBODY_CONVERSATION, REQBODY_STORE, REQBODY_BACKGROUND,
	REQBODY_REQUEST_ID, REQBODY_SERVICE_TIER, REQBODY_INPUT,
	REQBODY_USER, REQBODY_SAFETY_IDENTIFIER, REQBODY_METADATA,
	REQBODY_MEMBER_COUNT
};

#define REQBODY_FIRST_HINT REQBODY_MAX_TOKENS

static const char *const reqbody_names[REQBODY_MEMBER_COUNT] = {
	[REQBODY_MODEL] = "model", [REQBODY_STREAM] = "stream",
	[REQBODY_STREAM_OPTIONS] = "stream_options", [REQBODY_MAX_TOKENS] = "max_tokens",
	[REQBODY_MAX_COMPLETION_TOKENS] = "max_completion_tokens",
	[REQBODY_MAX_OUTPUT_TOKENS] = "max_output_tokens", [REQBODY_N] = "n",
	[REQBODY_BEST_OF] = "best_of", [REQBODY_LOGPROBS] = "logprobs",
	[REQBODY_TOP_LOGPROBS] = "top_logprobs", [REQBODY_ECHO] = "echo",
	[REQBODY_AUDIO] = "audio", [REQBODY_MODALITIES] = "modalities",
	[REQBODY_TOOLS] = "tools", [REQBODY_WEB_SEARCH] = "web_search_options",
	[REQBODY_MCP_SERVERS] = "mcp_servers",
	[REQBODY_PREVIOUS_RESPONSE_ID] = "previous_response_id",
	[REQBODY_CONVERSATION] = "conversation",
	[REQBODY_STORE] = "store",
	[REQBODY_BACKGROUND] = "background",
	[REQBODY_REQUEST_ID] = "request_id",
	[REQBODY_SERVICE_TIER] = "service_tier",
	[REQBODY_INPUT] = "input",
	[REQBODY_USER] = "user",
	[REQBODY_SAFETY_IDENTIFIER] = "safety_identifier",
	[REQBODY_METADATA] = "metadata",
};

/* A key as readers see it: the member it names, and whether they all agree. */
struct reqbody_key {
	enum reqbody_member m;
	int variant;            /* some readers take it for m, others not (case, fold) */
	int nul;                /* it holds NUL: a C-string reader cuts it, the rest do not */
};

#define REQBODY_MAX_TOKENS_DIGITS 9     /* keeps the value within a long */

struct reqbody_cursor {
	const char *start;
	const char *p;
	const char *end;
};

static int reqbody_is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static enum reqbody_scan reqbody_skip_ws(struct reqbody_cursor *s)
{
	while (s->p < s->end && reqbody_is_ws(*s->p))
		s->p++;
	return s->p < s->end ? REQBODY_SCAN_OK : REQBODY_SCAN_EOF;
}

/* At an opening quote: moves past the closing one. (raw, rawlen) is the content between
 * the quotes as sent. */
static enum reqbody_scan reqbody_string(struct reqbody_cursor *s, const char **raw, size_t *rawlen)
{
	const char *start = ++s->p;

	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;

		if (c == '"') {
			*raw = start;
			*rawlen = (size_t)(s->p - start);
			s->p++;
			return REQBODY_SCAN_OK;
		}
		if (c < 0x20)
			return REQBODY_SCAN_BAD;
		if (c == '\\' && ++s->p >= s->end)
			return REQBODY_SCAN_EOF;
		s->p++;
	}
	return REQBODY_SCAN_EOF;
}

/* Skips one nested value starting at { or [, matching brackets outside strings. */
static enum reqbody_scan reqbody_container(struct reqbody_cursor *s)
{
	char stack[REQBODY_MAX_DEPTH];
	size_t depth = 0, rawlen;
	const char *raw;
	enum reqbody_scan r;

	while (s->p < s->end) {
		char c = *s->p;

		if (c == '"') {
			if ((r = reqbody_string(s, &raw, &rawlen)) != REQBODY_SCAN_OK)
				return r;
			continue;
		}
		if (c == '{' || c == '[') {
			if (depth == sizeof(stack))
				return REQBODY_SCAN_BAD;
			stack[depth++] = c == '{' ? '}' : ']';
		} else if (c == '}' || c == ']') {
			if (depth == 0 || stack[depth - 1] != c)
				return REQBODY_SCAN_BAD;
			if (--depth == 0) {
				s->p++;
				return REQBODY_SCAN_OK;
			}
		}
		s->p++;
	}
	return REQBODY_SCAN_EOF;
}

/* Skips a number or a literal (true, false, null): up to the next delimiter. */
static enum reqbody_scan reqbody_scalar(struct reqbody_cursor *s, const char **tok, size_t *toklen)
{
	const char *start = s->p;

	while (s->p < s->end && !reqbody_is_ws(*s->p) && *s->p != ',' && *s->p != '}' &&
	       *s->p != ']') {
		if (!*s->p || !strchr("0123456789+-.eEtruefalsn", *s->p))
			return REQBODY_SCAN_BAD;
		s->p++;
	}
	*tok = start;
	*toklen = (size_t)(s->p - start);
	if (s->p == s->end)
		return REQBODY_SCAN_EOF;   /* a literal cut short is not yet known */
	return *toklen ? REQBODY_SCAN_OK : REQBODY_SCAN_BAD;
}

/* tok[0..len) is lit. Stops at the first difference: keys are compared against a
 * dozen names on every request, and most differ in their first byte. */
static int reqbody_token_is(const char *tok, size_t len, const char *lit)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (!lit[i] || tok[i] != lit[i])
			return 0;
	return lit[len] == '\0';
}

static int reqbody_hex4(const char *p, unsigned *out)
{
	unsigned v = 0;
	int i;

	for (i = 0; i < 4; i++) {
		char c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static size_t reqbody_utf8(unsigned cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Reads \uXXXX (and its low surrogate, for a high one) at raw[*i], which points past
 * the 'u'. Returns the code point, or -1 for a malformed or lone surrogate. */
static long reqbody_unicode(const char *raw, size_t len, size_t *i)
{
	unsigned cp, lo;

	if (len - *i < 4 || reqbody_hex4(raw + *i, &cp) < 0)
		return -1;
	*i += 4;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return -1;
	if (cp < 0xd800 || cp > 0xdbff)
		return cp;
	if (len - *i < 6 || raw[*i] != '\\' || raw[*i + 1] != 'u' ||
	    reqbody_hex4(raw + *i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
		return -1;
	*i += 6;
	return 0x10000 + ((long)(cp - 0xd800) << 10) + (lo - 0xdc00);
}

/* Decodes a JSON string's content into buf (cap bytes, NUL-terminated). Returns the
 * decoded length, -2 if it holds a NUL (no model name or key we look for holds one, and
 * C-string readers such as cJSON would cut there), or -1 if it does not fit or is
 * malformed. */
static long reqbody_unescape(const char *raw, size_t len, char *buf, size_t cap)
{
	size_t i = 0, o = 0;

	while (i < len) {
		char tmp[4];
		const char *src = &raw[i];
		size_t n = 1;

		if (raw[i++] == '\\') {
			long cp;

			if (i >= len)
				return -1;
			switch (raw[i++]) {
			case '"': tmp[0] = '"'; break;
			case '\\': tmp[0] = '\\'; break;
			case '/': tmp[0] = '/'; break;
			case 'b': tmp[0] = '\b'; break;
			case 'f': tmp[0] = '\f'; break;
			case 'n': tmp[0] = '\n'; break;
			case 'r': tmp[0] = '\r'; break;
			case 't': tmp[0] = '\t'; break;
			case 'u':
				if ((cp = reqbody_unicode(raw, len, &i)) < 0)
					return -1;
				if (cp == 0)
					return -2;
				n = reqbody_utf8((unsigned)cp, tmp);
				break;
			default:
				return -1;
			}
			src = tmp;
		}
		if (o + n >= cap)
			return -1;
		memcpy(buf + o, src, n);
		o += n;
	}
	buf[o] = '\0';
	return (long)o;
}

/* Folds a decoded key the way Go's encoding/json matches field names: ASCII case, and
 * U+017F (long s) and U+212A (Kelvin sign) as s and k. */
static size_t reqbody_fold(const char *key, size_t len, char *out)
{
	size_t i = 0, o = 0;

	while (i < len) {
		unsigned char c = (unsigned char)key[i];

		if (len - i >= 2 && c == 0xc5 && (unsigned char)key[i + 1] == 0xbf) {
			out[o++] = 's';
			i += 2;
		} else if (len - i >= 3 && c == 0xe2 && (unsigned char)key[i + 1] == 0x84 &&
		           (unsigned char)key[i + 2] == 0xaa) {
			out[o++] = 'k';
			i += 3;
		} else {
			out[o++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
			i++;
		}
	}
	return o;
}

/* Classifies a key as sent (raw, with escapes) against names[0..n) (NULL entries
 * skipped). */
static struct reqbody_key reqbody_key_of(const char *raw, size_t rawlen,
                                         const char *const *names, size_t n)
{
	char key[REQBODY_KEY_MAX], folded[REQBODY_KEY_MAX];
	long len = reqbody_unescape(raw, rawlen, key, sizeof(key));
	struct reqbody_key k = { REQBODY_OTHER, 0, len == -2 };
	size_t flen, i;

	if (len < 0)
		return k;       /* too long to be any of them, or NUL (k.nul) */
	flen = reqbody_fold(key, (size_t)len, folded);
	for (i = 0; i < n; i++) {
		if (!names[i] || !reqbody_token_is(folded, flen, names[i]))
			continue;
		k.m = (enum reqbody_member)i;
		/* "MODEL" is the model to Go and nothing to Python: nobody can judge it. */
		k.variant = !reqbody_token_is(key, (size_t)len, names[i]);
		break;
	}
	return k;
}

static void reqbody_set_model(struct reqbody_info *out, const char *raw, size_t rawlen)
{
	long n = reqbody_unescape(raw, rawlen, out->model, sizeof(out->model));
	long i;

	out->has_model = 1;
	if (n < 0) {
		out->model_unusable = 1;
		out->model[0] = '\0';
		return;
	}
	for (i = 0; i < n; i++)
		if ((unsigned char)out->model[i] < 0x20 || out->model[i] == 0x7f)
			out->model_unusable = 1;
}

/* A string value (raw: escapes as sent) into dst when ok takes it as it is (ok bounds
 * its length below dst's size); -1 otherwise. */
static int reqbody_plain(const char *raw, size_t len, int (*ok)(const char *, size_t), char *dst)
{
	if (!ok(raw, len))
		return -1;
	memcpy(dst, raw, len);
	dst[len] = '\0';
	return 0;
}

/* previous_response_id's string: kept when plain; any other form is state the gateway
 * cannot tie to a key. */
static void reqbody_set_previous(struct reqbody_info *out, const char *raw, size_t len)
{
	if (reqbody_plain(raw, len, acct_response_id_ok, out->previous_response_id) < 0)
		out->stateful_other = 1;
}

/* service_tier's string: a plain tier name is kept, any other is a tier the gateway
 * cannot price. */
static void reqbody_set_tier(struct reqbody_info *out, const char *raw, size_t len)
{
	if (reqbody_plain(raw, len, tier_name_ok, out->service_tier) < 0)
		out->tier_unknown = 1;
}

/* A plain non-negative integer that fits a long, else -1. */
static long reqbody_count(const char *tok, size_t len)
{
	long v = 0;
	size_t i;

	if (len == 0 || len > REQBODY_MAX_TOKENS_DIGITS)
		return -1;
	for (i = 0; i < len; i++) {
		if (tok[i] < '0' || tok[i] > '9')
			return -1;
		v = v * 10 + (tok[i] - '0');
	}
	return v;
}

/* A value of "tools" or "modalities" that is not a list: judged as the worst it could
 * be. */
static void reqbody_misshapen(struct reqbody_info *out, enum reqbody_member m)
{
	if (m == REQBODY_TOOLS)
		out->server_tools |= REQBODY_TOOL_OTHER;
	if (m == REQBODY_MODALITIES)
		out->audio_out = 1;
}

/* Records what a hint member's value says about the answer's size: tok is the scalar
 * token, NULL for a string or a container. */
static void reqbody_set_hint(struct reqbody_info *out, enum reqbody_member m, const char *tok,
                             size_t len)
{
	int null = tok && reqbody_token_is(tok, len, "null");
	int falsy = null || (tok && reqbody_token_is(tok, len, "false"));
	long v;

	switch (m) {
	case REQBODY_MAX_TOKENS:
	case REQBODY_MAX_COMPLETION_TOKENS:
		/* Not a plain integer: it bounds nothing the upstream must keep to. */
		if (tok && (v = reqbody_count(tok, len)) >= 0 && v > out->max_tokens)
			out->max_tokens = v;
		return;
	case REQBODY_MAX_OUTPUT_TOKENS:
		if (tok && (v = reqbody_count(tok, len)) >= 0 && v > out->max_output_tokens)
			out->max_output_tokens = v;
		return;
	case REQBODY_N:
	case REQBODY_BEST_OF:
		if (!null && !(tok && reqbody_token_is(tok, len, "1")))
			out->many_outputs = 1;
		return;
	case REQBODY_TOP_LOGPROBS:
		if (!null && !(tok && reqbody_token_is(tok, len, "0")))
			out->many_outputs = 1;
		return;
	case REQBODY_LOGPROBS:
	case REQBODY_ECHO:
		if (!falsy)
			out->many_outputs = 1;
		return;
	case REQBODY_AUDIO:
	case REQBODY_MODALITIES:
	case REQBODY_TOOLS:
	case REQBODY_WEB_SEARCH:
	case REQBODY_MCP_SERVERS:
		if (null)
			return;
		out->many_outputs = 1;
		/* The audio parameter asks for spoken output; chat's web search and
		 * Anthropic's MCP servers run at the provider, which reports no count of
		 * them. The lists are read by reqbody_list. */
		if (m == REQBODY_AUDIO)
			out->audio_out = 1;
		if (m == REQBODY_WEB_SEARCH || m == REQBODY_MCP_SERVERS)
			out->server_tools |= REQBODY_TOOL_OTHER;
		if (tok)
			reqbody_misshapen(out, m);
		return;
	case REQBODY_PREVIOUS_RESPONSE_ID:
	case REQBODY_CONVERSATION:
		if (!null)
			out->stateful = 1;
		/* A string previous_response_id is read by reqbody_set_previous. */
		if (!null && (m == REQBODY_CONVERSATION || tok))
			out->stateful_other = 1;
		return;
	case REQBODY_STORE:
		if (tok && reqbody_token_is(tok, len, "false"))
			out->store_off = 1;
		return;
	case REQBODY_BACKGROUND:
		if (!falsy)
			out->unaccountable = 1;
		return;
	case REQBODY_REQUEST_ID:
		if (!null)
			out->unaccountable = 1;
		return;
	case REQBODY_SERVICE_TIER:
		/* A string is read by reqbody_set_tier; anything else but null is no tier. */
		if (tok && !null)
			out->tier_unknown = 1;
		return;
	default:
		return;
	}
}

/* Skips one value of any kind; (*tok, *toklen) is its text. */
static enum reqbody_scan reqbody_skip_value(struct reqbody_cursor *s, const char **tok,
                                            size_t *toklen)
{
	const char *start = s->p, *raw;
	size_t rawlen;
	enum reqbody_scan r;

	if (*s->p == '"')
		r = reqbody_string(s, &raw, &rawlen);
	else if (*s->p == '{' || *s->p == '[')
		r = reqbody_container(s);
	else
		return reqbody_scalar(s, tok, toklen);
	*tok = start;
	*toklen = (size_t)(s->p - start);
	return r;
}

/* After a key: the colon and the white space around it, up to the value. */
static enum reqbody_scan reqbody_colon(struct reqbody_cursor *s)
{
	enum reqbody_scan r;

	if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
		return r;
	if (*s->p++ != ':')
		return REQBODY_SCAN_BAD;
	return reqbody_skip_ws(s);
}

/* What a tool of a request's "tools" is, by its "type" (raw, as sent): a tool the client
 * runs (a function, or one of the providers' own client tools), a web search the
 * provider runs, or another tool the provider runs (file search, code execution, MCP,
 * and any type this list does not know). A tool without a type is the client's
 * (Anthropic's custom tools). */
static int reqbody_tool_kind(const char *raw, size_t len)
{
	const size_t web = strlen(REQRULES_WEB_SEARCH_PREFIX);
	const char *const *t;
	char type[REQBODY_KEY_MAX];
	long n = reqbody_unescape(raw, len, type, sizeof(type));

	if (n < 0)
		return REQBODY_TOOL_OTHER;
	if ((size_t)n >= web && memcmp(type, REQRULES_WEB_SEARCH_PREFIX, web) == 0)
		return REQBODY_TOOL_WEB_SEARCH;
	for (t = reqrules_client_tools; *t; t++)
		if (reqbody_token_is(type, (size_t)n, *t))
			return 0;
	for (t = reqrules_client_tool_prefixes; *t; t++)
		if ((size_t)n > strlen(*t) && memcmp(type, *t, strlen(*t)) == 0)
			return 0;
	return REQBODY_TOOL_OTHER;
}

/* Walks an object (s at its '{') for its "type": *type and *len its raw string, NULL
 * when it has none; *unclear when one is twice, spelled so that only some readers take
 * it, or not a string (no reader's type can be judged then). */
static enum reqbody_scan reqbody_type_of(struct reqbody_cursor *s, const char **type,
                                         size_t *len, int *unclear)
{
	static const char *const names[] = { NULL, "type" };
	int typed = 0;
	enum reqbody_scan r;

	*type = NULL;
	*len = 0;
	*unclear = 0;
	s->p++;
	for (;;) {
		const char *key, *tok;
		size_t keylen, toklen;
		struct reqbody_key k;

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			break;
		if (*s->p != '"')
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_string(s, &key, &keylen)) != REQBODY_SCAN_OK)
			return r;
		k = reqbody_key_of(key, keylen, names, 2);
		if ((r = reqbody_colon(s)) != REQBODY_SCAN_OK)
			return r;
		/* "type\u0000" is "type" to a C-string reader and another key to the rest. */
		if (k.nul || (k.m != REQBODY_OTHER && (k.variant || typed++ || *s->p != '"')))
			*unclear = 1;
		if (k.m != REQBODY_OTHER && *s->p == '"' && !*unclear) {
			if ((r = reqbody_string(s, type, len)) != REQBODY_SCAN_OK)
				return r;
		} else if ((r = reqbody_skip_value(s, &tok, &toklen)) != REQBODY_SCAN_OK) {
			return r;
		}
		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			break;
		if (*s->p++ != ',')
			return REQBODY_SCAN_BAD;
	}
	s->p++;
	return REQBODY_SCAN_OK;
}

/* One tool (s at its '{'): its kind into out->server_tools. A tool whose type cannot be
 * judged is one the provider runs. */
static enum reqbody_scan reqbody_tool(struct reqbody_cursor *s, struct reqbody_info *out)
{
	const char *type;
	size_t len;
	int unclear;
	enum reqbody_scan r = reqbody_type_of(s, &type, &len, &unclear);

	if (r == REQBODY_SCAN_OK)
		out->server_tools |= unclear ? REQBODY_TOOL_OTHER : type ? reqbody_tool_kind(type, len) : 0;
	return r;
}

/* The array of a Responses "input" (s at its '['): whether an item is an item_reference,
 * an id of an item stored upstream, or one whose type cannot be judged. Other
 * elements (strings, token lists) are skipped. */
static enum reqbody_scan reqbody_input(struct reqbody_cursor *s, struct reqbody_info *out)
{
	enum reqbody_scan r;

	s->p++;
	for (;;) {
		const char *tok;
		size_t toklen;
		int unclear;
		long n;
		char word[sizeof("item_reference")];

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == ']')
			break;
		if (*s->p == '{') {
			r = reqbody_type_of(s, &tok, &toklen, &unclear);
			/* A NUL inside: a C-string reader may see "item_reference" before it. */
			n = tok ? reqbody_unescape(tok, toklen, word, sizeof(word)) : -1;
			if (r == REQBODY_SCAN_OK && (unclear || n == -2 ||
			    (n == 14 && memcmp(word, "item_reference", 14) == 0)))
				out->item_reference = 1;
		} else {
			r = reqbody_skip_value(s, &tok, &toklen);
		}
		if (r != REQBODY_SCAN_OK || (r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == ']')
			break;
		if (*s->p++ != ',')
			return REQBODY_SCAN_BAD;
	}
	s->p++;
	return REQBODY_SCAN_OK;
}

/* The array of "tools" (s at its '['), or "modalities" when modalities: whether a tool
 * is one the provider runs, whether audio is among the modalities. An element of
 * another shape is one nobody can judge. */
static enum reqbody_scan reqbody_list(struct reqbody_cursor *s, int modalities,
                                      struct reqbody_info *out)
{
	enum reqbody_scan r;

	s->p++;
	for (;;) {
		const char *tok;
		size_t toklen;
		char word[8];

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == ']')
			break;
		if (!modalities && *s->p == '{') {
			r = reqbody_tool(s, out);
		} else if (modalities && *s->p == '"') {
			if ((r = reqbody_string(s, &tok, &toklen)) == REQBODY_SCAN_OK &&
			    reqbody_unescape(tok, toklen, word, sizeof(word)) == 5 &&
			    memcmp(word, "audio", 5) == 0)
				out->audio_out = 1;
		} else {
			r = reqbody_skip_value(s, &tok, &toklen);
			if (modalities)
				out->audio_out = 1;
			else
				out->server_tools |= REQBODY_TOOL_OTHER;
		}
		if (r != REQBODY_SCAN_OK || (r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == ']')
			break;
		if (*s->p++ != ',')
			return REQBODY_SCAN_BAD;
	}
	s->p++;
	return REQBODY_SCAN_OK;
}

/* After a member's value in a nested object: past its comma (*closed 0) or its closing
 * brace (*closed 1). */
static enum reqbody_scan reqbody_after_member(struct reqbody_cursor *s, int *closed)
{
	enum reqbody_scan r;

	if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
		return r;
	*closed = *s->p == '}';
	if (!*closed && *s->p != ',')
		return REQBODY_SCAN_BAD;
	s->p++;
	return REQBODY_SCAN_OK;
}

/* Whether m names an end user (alone, or holding Anthropic's metadata.user_id). */
static int reqbody_names_end_user(enum reqbody_member m)
{
	return m == REQBODY_USER || m == REQBODY_SAFETY_IDENTIFIER || m == REQBODY_METADATA;
}

/* An end user named at rank by a string (raw, as sent) or, with raw NULL, by a value that
 * is no string (bad unless null): kept unless one of a higher rank came first. rank 0:
 * a member named twice, bad whatever came first. */
static void reqbody_set_end_user(struct reqbody_end_user *eu, int rank, const char *raw,
                                 size_t len, int null)
{
	long n;

	if (rank == 0) {
		eu->state = REQBODY_END_USER_BAD;
		eu->id[0] = '\0';
		eu->rank = INT_MAX;
		return;
	}
	if (rank < eu->rank || (!raw && null))
		return;
	eu->rank = rank;
	eu->state = REQBODY_END_USER_BAD;
	if (raw && (n = reqbody_unescape(raw, len, eu->id, sizeof(eu->id))) >= 0 &&
	    enduser_id_ok(eu->id, (size_t)n))
		eu->state = REQBODY_END_USER_OK;
	if (eu->state != REQBODY_END_USER_OK)
		eu->id[0] = '\0';
}

/* Walks the object value of "metadata" (s at its '{') for Anthropic's user_id; twice is
 * bad. */
static enum reqbody_scan reqbody_metadata(struct reqbody_cursor *s, struct reqbody_end_user *eu)
{
	static const char *const names[] = { NULL, "user_id" };
	int seen = 0, closed;
	enum reqbody_scan r;

	s->p++;
	for (;;) {
		const char *key, *tok;
		size_t keylen, toklen;
		struct reqbody_key k;

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}' && !seen) {
			s->p++;
			return REQBODY_SCAN_OK;
		}
		if (*s->p != '"')
			return REQBODY_SCAN_BAD;
		seen |= 2;
		if ((r = reqbody_string(s, &key, &keylen)) != REQBODY_SCAN_OK)
			return r;
		k = reqbody_key_of(key, keylen, names, 2);
		if ((r = reqbody_colon(s)) != REQBODY_SCAN_OK)
			return r;
		if (k.m != REQBODY_OTHER && !k.variant && (seen & 1)) {
			reqbody_set_end_user(eu, 0, NULL, 0, 0);
			k.m = REQBODY_OTHER;
		}
		if (k.m != REQBODY_OTHER && !k.variant && *s->p == '"') {
			if ((r = reqbody_string(s, &tok, &toklen)) != REQBODY_SCAN_OK)
				return r;
			reqbody_set_end_user(eu, 1, tok, toklen, 0);
			seen |= 1;
		} else {
			if ((r = reqbody_skip_value(s, &tok, &toklen)) != REQBODY_SCAN_OK)
				return r;
			if (k.m != REQBODY_OTHER && !k.variant) {
				reqbody_set_end_user(eu, 1, NULL, 0, reqbody_token_is(tok, toklen, "null"));
				seen |= 1;
			}
		}
		if ((r = reqbody_after_member(s, &closed)) != REQBODY_SCAN_OK || closed)
			return r;
	}
}

/* The value of a top-level member naming an end user (s at its first byte). */
static enum reqbody_scan reqbody_end_user(struct reqbody_cursor *s, enum reqbody_member m,
                                          struct reqbody_info *out)
{
	int rank = m == REQBODY_SAFETY_IDENTIFIER ? 2 : 1;
	const char *tok;
	size_t toklen;
	enum reqbody_scan r;

	if (m == REQBODY_METADATA)
		return *s->p == '{' ? reqbody_metadata(s, &out->anthropic_user)
		                    : reqbody_skip_value(s, &tok, &toklen);
	if (*s->p == '"') {
		if ((r = reqbody_string(s, &tok, &toklen)) == REQBODY_SCAN_OK)
			reqbody_set_end_user(&out->openai_user, rank, tok, toklen, 0);
		return r;
	}
	if ((r = reqbody_skip_value(s, &tok, &toklen)) == REQBODY_SCAN_OK)
		reqbody_set_end_user(&out->openai_user, rank, NULL, 0,
		                     reqbody_token_is(tok, toklen, "null"));
	return r;
}

/* Walks the object value of "stream_options" (s at its '{'): where include_usage is and
 * what it says. One include_usage, spelled exactly, or the body is invalid. */
static enum reqbody_scan reqbody_stream_options(struct reqbody_cursor *s,
                                                struct reqbody_stream_options *so)
{
	static const char *const names[] = { NULL, "include_usage" };
	enum reqbody_scan r;
	int closed;

	s->p++;
	so->is_object = 1;
	so->empty = 1;
	so->include_usage = -1;
	so->open_end = (size_t)(s->p - s->start);
	for (;;) {
		const char *key, *tok;
		size_t keylen, toklen;
		struct reqbody_key k;

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}' && so->empty) {
			s->p++;
			return REQBODY_SCAN_OK;
		}
		if (*s->p != '"')
			return REQBODY_SCAN_BAD;
		so->empty = 0;
		if ((r = reqbody_string(s, &key, &keylen)) != REQBODY_SCAN_OK)
			return r;
		k = reqbody_key_of(key, keylen, names, 2);
		if (k.nul || (k.m != REQBODY_OTHER && (k.variant || so->include_usage >= 0)))
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_colon(s)) != REQBODY_SCAN_OK)
			return r;
		if ((r = reqbody_skip_value(s, &tok, &toklen)) != REQBODY_SCAN_OK)
			return r;
		if (k.m != REQBODY_OTHER) {
			so->include_usage = reqbody_token_is(tok, toklen, "true");
			so->iu_at = (size_t)(tok - s->start);
			so->iu_len = toklen;
		}
		if ((r = reqbody_after_member(s, &closed)) != REQBODY_SCAN_OK || closed)
			return r;
	}
}

/* Reads one top-level member's value, recording model, stream, stream_options and
 * output hints. */
static enum reqbody_scan reqbody_member_value(struct reqbody_cursor *s, enum reqbody_member m,
                                              struct reqbody_info *out)
{
	const char *tok;
	size_t toklen;
	enum reqbody_scan r;

	if (reqbody_names_end_user(m))
		return reqbody_end_user(s, m, out);
	if (m == REQBODY_STREAM_OPTIONS) {
		struct reqbody_stream_options *so = &out->stream_options;

		so->present = 1;
		so->value_at = (size_t)(s->p - s->start);
		r = *s->p == '{' ? reqbody_stream_options(s, so) : reqbody_skip_value(s, &tok, &toklen);
		so->value_len = (size_t)(s->p - s->start) - so->value_at;
		so->whole = r == REQBODY_SCAN_OK;
		return r;
	}
	if (*s->p == '"') {
		if ((r = reqbody_string(s, &tok, &toklen)) != REQBODY_SCAN_OK)
			return r;
		if (m == REQBODY_STREAM)
			return REQBODY_SCAN_BAD;
		if (m == REQBODY_MODEL)
			reqbody_set_model(out, tok, toklen);
		else
			reqbody_set_hint(out, m, NULL, 0);
		reqbody_misshapen(out, m);
		if (m == REQBODY_PREVIOUS_RESPONSE_ID)
			reqbody_set_previous(out, tok, toklen);
		if (m == REQBODY_SERVICE_TIER)
			reqbody_set_tier(out, tok, toklen);
		return REQBODY_SCAN_OK;
	}
	if (*s->p == '{' || *s->p == '[') {
		if (m == REQBODY_MODEL || m == REQBODY_STREAM)
			return REQBODY_SCAN_BAD;
		if (m == REQBODY_PREVIOUS_RESPONSE_ID)
			out->stateful_other = 1;
		if (*s->p == '[' && (m == REQBODY_TOOLS || m == REQBODY_MODALITIES)) {
			r = reqbody_list(s, m == REQBODY_MODALITIES, out);
		} else if (*s->p == '[' && m == REQBODY_INPUT) {
			r = reqbody_input(s, out);
		} else {
			if (m == REQBODY_INPUT)
				out->item_reference = 1;   /* no input a reader takes: judged the worst */
			reqbody_misshapen(out, m);
			r = reqbody_container(s);
		}
		if (r == REQBODY_SCAN_OK)
			reqbody_set_hint(out, m, NULL, 0);
		return r;
	}
	if ((r = reqbody_scalar(s, &tok, &toklen)) != REQBODY_SCAN_OK)
		return r;
	if (m == REQBODY_MODEL)
		return REQBODY_SCAN_BAD;
	if (m == REQBODY_STREAM) {
		if (reqbody_token_is(tok, toklen, "true"))
			out->stream = 1;
		else if (reqbody_token_is(tok, toklen, "false") || reqbody_token_is(tok, toklen, "null"))
			out->stream = 0;
		else
			return REQBODY_SCAN_BAD;
		return REQBODY_SCAN_OK;
	}
	reqbody_set_hint(out, m, tok, toklen);
	return REQBODY_SCAN_OK;
}

/* Walks the top-level object. OK: it closed (s->p at its '}'); EOF: a valid prefix
 * cut short; BAD: not an object we accept. */
static enum reqbody_scan reqbody_object(struct reqbody_cursor *s, struct reqbody_info *out)
{
	unsigned seen[REQBODY_MEMBER_COUNT] = { 0 };
	enum reqbody_scan r;

	if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
		return r;
	if (*s->p++ != '{')
		return REQBODY_SCAN_BAD;
	out->open_end = (size_t)(s->p - s->start);
	for (;;) {
		const char *key;
		size_t keylen;
		struct reqbody_key k;

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			return REQBODY_SCAN_OK;
		if (*s->p != '"')
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_string(s, &key, &keylen)) != REQBODY_SCAN_OK)
			return r;
		k = reqbody_key_of(key, keylen, reqbody_names, REQBODY_MEMBER_COUNT);
		/* "model\u0000" is "model" to a C-string reader and another key to the rest. */
		if (k.nul)
			return REQBODY_SCAN_BAD;
		/* Only the gateway reads end users: another spelling is another member, and
		 * one named twice is none it can tell. */
		if (reqbody_names_end_user(k.m)) {
			if (!k.variant && seen[k.m]++)
				reqbody_set_end_user(k.m == REQBODY_METADATA ? &out->anthropic_user
				                                             : &out->openai_user,
				                     0, NULL, 0, 0);
			if (k.variant || seen[k.m] > 1)
				k.m = REQBODY_OTHER;
		} else if (k.m != REQBODY_OTHER && (k.variant || seen[k.m]++)) {
			/* A judged member nobody can judge: invalid. A hint: its bound is
			 * unknown, and the capture path reads answers of any size. */
			if (k.m < REQBODY_FIRST_HINT)
				return REQBODY_SCAN_BAD;
			/* A reference to stored state however spelled: some reader takes it. */
			if (k.m == REQBODY_PREVIOUS_RESPONSE_ID || k.m == REQBODY_CONVERSATION)
				out->stateful = out->stateful_other = 1;
			if (k.m == REQBODY_STORE)
				out->store_ambiguous = 1;
			if (k.m == REQBODY_BACKGROUND || k.m == REQBODY_REQUEST_ID)
				out->unaccountable = 1;
			if (k.m == REQBODY_SERVICE_TIER)
				out->tier_unknown = 1;
			if (k.m == REQBODY_INPUT)
				out->item_reference = 1;
			if (k.m == REQBODY_TOOLS || k.m == REQBODY_WEB_SEARCH || k.m == REQBODY_MCP_SERVERS)
				out->server_tools |= REQBODY_TOOL_OTHER;
			if (k.m == REQBODY_AUDIO || k.m == REQBODY_MODALITIES)
				out->audio_out = 1;
			out->hints_ambiguous = 1;
			k.m = REQBODY_OTHER;
		}
		if ((r = reqbody_colon(s)) != REQBODY_SCAN_OK)
			return r;
		if ((r = reqbody_member_value(s, k.m, out)) != REQBODY_SCAN_OK)
			return r;
		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			return REQBODY_SCAN_OK;
		if (*s->p++ != ',')
			return REQBODY_SCAN_BAD;
	}
}

/* Whether s (n bytes) folds (reqbody_fold) to name; s longer than any name is not. */
static int reqbody_folds_to(const char *s, size_t n, const char *name)
{
	char folded[REQBODY_KEY_MAX];

	return n < sizeof(folded) && reqbody_token_is(folded, reqbody_fold(s, n, folded), name);
}

/* Whether object j names its content by reference: a URL or a file id (OpenAI's
 * image_url, file_url, file_id; Anthropic's source of type url or file), not inline. */
static int reqbody_by_reference(const cJSON *j)
{
	static const char *const refs[] = { "image_url", "file_url", "file_id", "url" };
	const cJSON *src = cJSON_GetObjectItemCaseSensitive(j, "source"), *t;
	size_t i;

	for (i = 0; i < sizeof(refs) / sizeof(refs[0]); i++)
		if (cJSON_GetObjectItemCaseSensitive(j, refs[i]))
			return 1;
	t = cJSON_GetObjectItemCaseSensitive(src, "type");
	return cJSON_IsString(t) && (strcmp(t->valuestring, "url") == 0 ||
	                             strcmp(t->valuestring, "file") == 0);
}

/* Counts an input part given by reference (reqbody_info's url_images, url_files). */
static void reqbody_reference(const cJSON *j, struct reqbody_info *out)
{
	static const char *const images[] = { "image_url", "input_image", "image" };
	static const char *const files[] = { "input_file", "document", "file" };
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	size_t i;

	if (!cJSON_IsObject(j) || !cJSON_IsString(t) || !reqbody_by_reference(j))
		return;
	for (i = 0; i < sizeof(images) / sizeof(images[0]); i++)
		if (strcmp(t->valuestring, images[i]) == 0 && out->url_images < INT_MAX)
			out->url_images++;
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (strcmp(t->valuestring, files[i]) == 0 && out->url_files < INT_MAX)
			out->url_files++;
}

/* Walks j's members and elements at every depth for what is billed apart and sits in
 * nested content (reqbody_info's audio_in, cache_write, url_images, url_files). cJSON
 * bounds the depth. */
static void reqbody_walk(const cJSON *j, struct reqbody_info *out)
{
	const cJSON *c;

	reqbody_reference(j, out);
	for (c = j->child; c; c = c->next) {
		if (c->string && !cJSON_IsNull(c)) {
			size_t n = strlen(c->string);

			if (reqbody_folds_to(c->string, n, "input_audio") ||
			    (reqbody_folds_to(c->string, n, "type") && cJSON_IsString(c) &&
			     reqbody_folds_to(c->valuestring, strlen(c->valuestring), "input_audio")))
				out->audio_in = 1;
			if (reqbody_folds_to(c->string, n, "cache_control"))
				out->cache_write = 1;
		}
		reqbody_walk(c, out);
	}
}

/* The scanner is lax inside nested values; cJSON checks the whole text, whose tree is
 * then walked (reqbody_walk). */
static int reqbody_valid_json(const char *body, size_t len, struct reqbody_info *out)
{
	cJSON *root = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
	int ok = root != NULL;

	if (root)
		reqbody_walk(root, out);
	cJSON_Delete(root);
	return ok;
}

enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out)
{
	struct reqbody_cursor s;
	enum reqbody_scan r;

	memset(out, 0, sizeof(*out));
	out->stream = -1;
	out->max_tokens = out->max_output_tokens = -1;
	if (len == 0)
		return REQBODY_EMPTY;   /* body may then be NULL: no pointer arithmetic on it */
	s.start = s.p = body;
	s.end = body + len;
	if (reqbody_skip_ws(&s) == REQBODY_SCAN_EOF)
		return REQBODY_EMPTY;
	r = reqbody_object(&s, out);
	if (r == REQBODY_SCAN_EOF)
		return REQBODY_PREFIX;
	if (r == REQBODY_SCAN_OK) {
		s.p++;
		if (reqbody_skip_ws(&s) == REQBODY_SCAN_EOF && reqbody_valid_json(body, len, out)) {
			if (out->stream < 0)
				out->stream = 0;
			return REQBODY_COMPLETE;
		}
	}
	memset(out, 0, sizeof(*out));
	out->max_tokens = out->max_output_tokens = -1;
	return REQBODY_INVALID;
}
