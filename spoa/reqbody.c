/* reqbody: finds "model" and "stream" in a request body (I/O threads, pure).
 *
 * A whole body is parsed with cJSON. A body cut by HAProxy's buffer is not valid JSON,
 * so a small scanner walks the prefix instead: it checks the top-level object strictly
 * (key, colon, value, comma) and skips nested values by tracking strings and brackets,
 * which is enough to know at which depth every key stands. */
#include "reqbody.h"

#include <cjson/cJSON.h>
#include <string.h>

#define REQBODY_MAX_DEPTH 512

enum scan_result { SCAN_OK, SCAN_EOF, SCAN_BAD };

struct scan {
	const char *p;
	const char *end;
};

static int reqbody_is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int reqbody_only_ws(const char *p, const char *end)
{
	while (p < end && reqbody_is_ws(*p))
		p++;
	return p == end;
}

static enum scan_result scan_ws(struct scan *s)
{
	while (s->p < s->end && reqbody_is_ws(*s->p))
		s->p++;
	return s->p < s->end ? SCAN_OK : SCAN_EOF;
}

/* At an opening quote: moves past the closing one. (raw, rawlen) is the content between
 * the quotes as sent; *escaped tells whether it holds backslash escapes. */
static enum scan_result scan_string(struct scan *s, const char **raw, size_t *rawlen, int *escaped)
{
	const char *start = ++s->p;

	*escaped = 0;
	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;

		if (c == '"') {
			*raw = start;
			*rawlen = (size_t)(s->p - start);
			s->p++;
			return SCAN_OK;
		}
		if (c < 0x20)
			return SCAN_BAD;
		if (c == '\\') {
			*escaped = 1;
			if (++s->p >= s->end)
				return SCAN_EOF;
		}
		s->p++;
	}
	return SCAN_EOF;
}

/* Skips one nested value starting at { or [, matching brackets outside strings. */
static enum scan_result scan_container(struct scan *s)
{
	char stack[REQBODY_MAX_DEPTH];
	size_t depth = 0;
	const char *raw;
	size_t rawlen;
	int escaped;
	enum scan_result r;

	while (s->p < s->end) {
		char c = *s->p;

		if (c == '"') {
			if ((r = scan_string(s, &raw, &rawlen, &escaped)) != SCAN_OK)
				return r;
			continue;
		}
		if (c == '{' || c == '[') {
			if (depth == sizeof(stack))
				return SCAN_BAD;
			stack[depth++] = c == '{' ? '}' : ']';
		} else if (c == '}' || c == ']') {
			if (depth == 0 || stack[depth - 1] != c)
				return SCAN_BAD;
			if (--depth == 0) {
				s->p++;
				return SCAN_OK;
			}
		}
		s->p++;
	}
	return SCAN_EOF;
}

/* Skips a number or a literal (true, false, null): up to the next delimiter. */
static enum scan_result scan_scalar(struct scan *s, const char **tok, size_t *toklen)
{
	const char *start = s->p;

	while (s->p < s->end && !reqbody_is_ws(*s->p) && *s->p != ',' && *s->p != '}' &&
	       *s->p != ']') {
		if (!strchr("0123456789+-.eEtruefalsn", *s->p))
			return SCAN_BAD;
		s->p++;
	}
	*tok = start;
	*toklen = (size_t)(s->p - start);
	if (s->p == s->end)
		return SCAN_EOF;
	return *toklen ? SCAN_OK : SCAN_BAD;
}

static int reqbody_token_is(const char *tok, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(tok, lit, len) == 0;
}

static void reqbody_set_model(struct reqbody_info *out, const char *s, size_t len)
{
	out->has_model = 1;
	if (len >= REQBODY_MODEL_MAX) {
		out->model_too_long = 1;
		len = REQBODY_MODEL_MAX - 1;
	}
	memcpy(out->model, s, len);
	out->model[len] = '\0';
}

enum member { MEMBER_OTHER, MEMBER_MODEL, MEMBER_STREAM };

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

/* Decodes a JSON string's escapes into buf (cap bytes, NUL-terminated). Returns the
 * decoded length, or -1 if it does not fit, is malformed, or holds a code point outside
 * printable ASCII: model names and the keys we look for are plain ASCII, so anything
 * else cannot be one of them and is not worth decoding. */
static long reqbody_unescape(const char *raw, size_t len, char *buf, size_t cap)
{
	size_t i = 0, o = 0;

	while (i < len) {
		char c = raw[i++];

		if (c == '\\') {
			unsigned cp;

			if (i >= len)
				return -1;
			switch ((c = raw[i++])) {
			case '"': case '\\': case '/':
				break;
			case 'u':
				if (len - i < 4 || reqbody_hex4(raw + i, &cp) < 0 || cp < 0x20 || cp > 0x7e)
					return -1;
				i += 4;
				c = (char)cp;
				break;
			default:
				return -1;   /* \b \f \n \r \t never appear in a model name */
			}
		}
		if (o + 1 >= cap)
			return -1;
		buf[o++] = c;
	}
	buf[o] = '\0';
	return (long)o;
}

static enum member reqbody_member(const char *key, size_t len)
{
	if (reqbody_token_is(key, len, "model"))
		return MEMBER_MODEL;
	if (reqbody_token_is(key, len, "stream"))
		return MEMBER_STREAM;
	return MEMBER_OTHER;
}

/* Keys are compared decoded, so that "mod\u0065l" cannot hide a second model from us
 * while the upstream's JSON parser sees it. */
static enum member reqbody_member_escaped(const char *key, size_t len, int escaped)
{
	char buf[16];
	long n;

	if (!escaped)
		return reqbody_member(key, len);
	n = reqbody_unescape(key, len, buf, sizeof(buf));
	return n < 0 ? MEMBER_OTHER : reqbody_member(buf, (size_t)n);
}

/* Reads one top-level member's value, recording model and stream. */
static enum scan_result scan_member_value(struct scan *s, enum member m, struct reqbody_info *out)
{
	const char *tok;
	size_t toklen;
	int escaped;
	enum scan_result r;

	if (*s->p == '"') {
		if ((r = scan_string(s, &tok, &toklen, &escaped)) != SCAN_OK)
			return r;
		if (m == MEMBER_STREAM)
			return SCAN_BAD;
		if (m == MEMBER_MODEL) {
			char buf[REQBODY_MODEL_MAX];
			long n;

			if (!escaped) {
				reqbody_set_model(out, tok, toklen);
			} else if ((n = reqbody_unescape(tok, toklen, buf, sizeof(buf))) >= 0) {
				reqbody_set_model(out, buf, (size_t)n);
			} else {
				/* Not plain ASCII or too long: no registered model has such a
				 * name, so record it as an unknown one rather than as absent. */
				reqbody_set_model(out, tok, toklen);
				out->model_too_long = 1;
			}
		}
		return SCAN_OK;
	}
	if (*s->p == '{' || *s->p == '[')
		return m == MEMBER_OTHER ? scan_container(s) : SCAN_BAD;
	r = scan_scalar(s, &tok, &toklen);
	if (r != SCAN_OK)
		return r;   /* a literal cut short is not yet known */
	if (m == MEMBER_MODEL)
		return SCAN_BAD;
	if (m == MEMBER_STREAM) {
		if (reqbody_token_is(tok, toklen, "true"))
			out->stream = 1;
		else if (reqbody_token_is(tok, toklen, "false") || reqbody_token_is(tok, toklen, "null"))
			out->stream = 0;
		else
			return SCAN_BAD;
	}
	return SCAN_OK;
}

/* Walks a prefix that cJSON refused. SCAN_EOF means it is a valid JSON prefix cut short;
 * SCAN_OK means a complete object that cJSON still refused, i.e. invalid. */
static enum scan_result scan_prefix(struct scan *s, struct reqbody_info *out)
{
	int seen_model = 0, seen_stream = 0;
	enum scan_result r;

	if ((r = scan_ws(s)) != SCAN_OK)
		return r;
	if (*s->p++ != '{')
		return SCAN_BAD;
	for (;;) {
		const char *key;
		size_t keylen;
		int escaped;
		enum member m;

		if ((r = scan_ws(s)) != SCAN_OK)
			return r;
		if (*s->p == '}')
			return SCAN_OK;
		if (*s->p != '"')
			return SCAN_BAD;
		if ((r = scan_string(s, &key, &keylen, &escaped)) != SCAN_OK)
			return r;
		m = reqbody_member_escaped(key, keylen, escaped);
		if ((m == MEMBER_MODEL && seen_model++) || (m == MEMBER_STREAM && seen_stream++))
			return SCAN_BAD;
		if ((r = scan_ws(s)) != SCAN_OK)
			return r;
		if (*s->p++ != ':')
			return SCAN_BAD;
		if ((r = scan_ws(s)) != SCAN_OK)
			return r;
		if ((r = scan_member_value(s, m, out)) != SCAN_OK)
			return r;
		if ((r = scan_ws(s)) != SCAN_OK)
			return r;
		if (*s->p == '}')
			return SCAN_OK;
		if (*s->p++ != ',')
			return SCAN_BAD;
	}
}

static enum reqbody_status reqbody_from_json(const cJSON *root, struct reqbody_info *out)
{
	const cJSON *item;
	int seen_model = 0, seen_stream = 0;

	if (!cJSON_IsObject(root))
		return REQBODY_INVALID;
	out->stream = 0;
	cJSON_ArrayForEach(item, root) {
		enum member m = reqbody_member(item->string, strlen(item->string));

		if (m == MEMBER_MODEL) {
			if (seen_model++ || !cJSON_IsString(item))
				return REQBODY_INVALID;
			reqbody_set_model(out, item->valuestring, strlen(item->valuestring));
		} else if (m == MEMBER_STREAM) {
			if (seen_stream++)
				return REQBODY_INVALID;
			if (cJSON_IsBool(item))
				out->stream = cJSON_IsTrue(item);
			else if (!cJSON_IsNull(item))
				return REQBODY_INVALID;
		}
	}
	return REQBODY_COMPLETE;
}

enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out)
{
	struct scan s;
	const char *parse_end = NULL;
	enum reqbody_status st;
	cJSON *root;

	memset(out, 0, sizeof(*out));
	out->stream = -1;
	if (len == 0)
		return REQBODY_EMPTY;   /* body may then be NULL: no pointer arithmetic on it */
	s.p = body;
	s.end = body + len;
	if (scan_ws(&s) == SCAN_EOF)
		return REQBODY_EMPTY;
	root = cJSON_ParseWithLengthOpts(body, len, &parse_end, 0);
	if (root && !reqbody_only_ws(parse_end, body + len)) {
		cJSON_Delete(root);
		return REQBODY_INVALID;   /* a whole value followed by more than white space */
	}
	if (root) {
		st = reqbody_from_json(root, out);
		cJSON_Delete(root);
		if (st == REQBODY_INVALID)
			memset(out, 0, sizeof(*out));
		return st;
	}
	if (scan_prefix(&s, out) == SCAN_EOF)
		return REQBODY_PREFIX;
	memset(out, 0, sizeof(*out));
	return REQBODY_INVALID;
}
