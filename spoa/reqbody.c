/* reqbody: finds "model", "stream" and the output bounds in a request body (I/O threads,
 * pure).
 *
 * One scanner reads the top-level object strictly (key, colon, value, comma) and skips
 * nested values by tracking strings and brackets, which is enough to know at which
 * depth every key stands. It works on whole bodies and on bodies cut by HAProxy's
 * buffer alike, so both are judged by the same code; a whole body must then also pass
 * cJSON's full validation. Strings are decoded before they are compared, so that an
 * escaped spelling of a key or model name is judged as the upstream will read it. */
#include "reqbody.h"

#include <cjson/cJSON.h>
#include <string.h>

#define REQBODY_MAX_DEPTH 512
#define REQBODY_KEY_MAX   32    /* longer keys cannot fold to "model" or "stream" */

enum reqbody_scan { REQBODY_SCAN_OK, REQBODY_SCAN_EOF, REQBODY_SCAN_BAD };

enum reqbody_member { REQBODY_OTHER, REQBODY_MODEL, REQBODY_STREAM, REQBODY_AMBIGUOUS };

enum reqbody_hint { REQBODY_HINT_NONE, REQBODY_HINT_MAX_TOKENS, REQBODY_HINT_N,
                    REQBODY_HINT_LOGPROBS };

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

static int reqbody_token_is(const char *tok, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(tok, lit, len) == 0;
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

/* Classifies a top-level key as sent (raw, with escapes). */
static enum reqbody_member reqbody_member_of(const char *raw, size_t rawlen)
{
	char key[REQBODY_KEY_MAX], folded[REQBODY_KEY_MAX];
	long n = reqbody_unescape(raw, rawlen, key, sizeof(key));
	size_t flen;
	enum reqbody_member exact;

	if (n == -2)
		return REQBODY_AMBIGUOUS;   /* "model\u0000" is "model" to a C-string reader */
	if (n < 0)
		return REQBODY_OTHER;       /* too long to be either */
	flen = reqbody_fold(key, (size_t)n, folded);
	if (reqbody_token_is(folded, flen, "model"))
		exact = REQBODY_MODEL;
	else if (reqbody_token_is(folded, flen, "stream"))
		exact = REQBODY_STREAM;
	else
		return REQBODY_OTHER;
	/* "MODEL" is the model to Go and nothing to Python: nobody can judge it. */
	if (!reqbody_token_is(key, (size_t)n, exact == REQBODY_MODEL ? "model" : "stream"))
		return REQBODY_AMBIGUOUS;
	return exact;
}

/* Case and escapes aside, is this key "stream_options"? Any reader's match counts: the
 * gateway must never add a second one. */
static int reqbody_names_stream_options(const char *raw, size_t rawlen)
{
	char key[REQBODY_KEY_MAX], folded[REQBODY_KEY_MAX];
	long n = reqbody_unescape(raw, rawlen, key, sizeof(key));

	return n >= 0 && reqbody_token_is(folded, reqbody_fold(key, (size_t)n, folded),
	                                  "stream_options");
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

static enum reqbody_hint reqbody_hint_of(const char *raw, size_t rawlen)
{
	if (reqbody_token_is(raw, rawlen, "max_tokens") ||
	    reqbody_token_is(raw, rawlen, "max_completion_tokens"))
		return REQBODY_HINT_MAX_TOKENS;
	if (reqbody_token_is(raw, rawlen, "n"))
		return REQBODY_HINT_N;
	if (reqbody_token_is(raw, rawlen, "logprobs"))
		return REQBODY_HINT_LOGPROBS;
	return REQBODY_HINT_NONE;
}

/* Records what a scalar says about the response's size. A max_tokens that is not a
 * plain non-negative integer bounds nothing: the upstream will judge it. */
static void reqbody_set_hint(struct reqbody_info *out, enum reqbody_hint h, const char *tok,
                             size_t len)
{
	long v = 0;
	size_t i;

	switch (h) {
	case REQBODY_HINT_MAX_TOKENS:
		if (len == 0 || len > REQBODY_MAX_TOKENS_DIGITS)
			return;
		for (i = 0; i < len; i++) {
			if (tok[i] < '0' || tok[i] > '9')
				return;
			v = v * 10 + (tok[i] - '0');
		}
		if (v > out->max_tokens)
			out->max_tokens = v;
		return;
	case REQBODY_HINT_N:
		if (!reqbody_token_is(tok, len, "1") && !reqbody_token_is(tok, len, "null"))
			out->many_outputs = 1;
		return;
	case REQBODY_HINT_LOGPROBS:
		if (reqbody_token_is(tok, len, "true"))
			out->many_outputs = 1;
		return;
	case REQBODY_HINT_NONE:
		return;
	}
}

/* Reads one top-level member's value, recording model, stream and output hints. */
static enum reqbody_scan reqbody_member_value(struct reqbody_cursor *s, enum reqbody_member m,
                                              enum reqbody_hint h, struct reqbody_info *out)
{
	const char *tok;
	size_t toklen;
	enum reqbody_scan r;

	if (*s->p == '"') {
		if ((r = reqbody_string(s, &tok, &toklen)) != REQBODY_SCAN_OK)
			return r;
		if (m == REQBODY_STREAM)
			return REQBODY_SCAN_BAD;
		if (m == REQBODY_MODEL)
			reqbody_set_model(out, tok, toklen);
		return REQBODY_SCAN_OK;
	}
	if (*s->p == '{' || *s->p == '[')
		return m == REQBODY_OTHER ? reqbody_container(s) : REQBODY_SCAN_BAD;
	if ((r = reqbody_scalar(s, &tok, &toklen)) != REQBODY_SCAN_OK)
		return r;
	if (m == REQBODY_MODEL)
		return REQBODY_SCAN_BAD;
	reqbody_set_hint(out, h, tok, toklen);
	if (m == REQBODY_STREAM) {
		if (reqbody_token_is(tok, toklen, "true"))
			out->stream = 1;
		else if (reqbody_token_is(tok, toklen, "false") || reqbody_token_is(tok, toklen, "null"))
			out->stream = 0;
		else
			return REQBODY_SCAN_BAD;
	}
	return REQBODY_SCAN_OK;
}

/* Walks the top-level object. OK: it closed (s->p at its '}'); EOF: a valid prefix
 * cut short; BAD: not an object we accept. */
static enum reqbody_scan reqbody_object(struct reqbody_cursor *s, struct reqbody_info *out)
{
	int seen_model = 0, seen_stream = 0;
	enum reqbody_scan r;

	if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
		return r;
	if (*s->p++ != '{')
		return REQBODY_SCAN_BAD;
	out->open_end = (size_t)(s->p - s->start);
	for (;;) {
		const char *key;
		size_t keylen;
		enum reqbody_member m;

		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			return REQBODY_SCAN_OK;
		if (*s->p != '"')
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_string(s, &key, &keylen)) != REQBODY_SCAN_OK)
			return r;
		m = reqbody_member_of(key, keylen);
		if (reqbody_names_stream_options(key, keylen))
			out->has_stream_options = 1;
		if (m == REQBODY_AMBIGUOUS || (m == REQBODY_MODEL && seen_model++) ||
		    (m == REQBODY_STREAM && seen_stream++))
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p++ != ':')
			return REQBODY_SCAN_BAD;
		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if ((r = reqbody_member_value(s, m, reqbody_hint_of(key, keylen), out)) !=
		    REQBODY_SCAN_OK)
			return r;
		if ((r = reqbody_skip_ws(s)) != REQBODY_SCAN_OK)
			return r;
		if (*s->p == '}')
			return REQBODY_SCAN_OK;
		if (*s->p++ != ',')
			return REQBODY_SCAN_BAD;
	}
}

/* The scanner is lax inside nested values; cJSON checks the whole text. */
static int reqbody_valid_json(const char *body, size_t len)
{
	cJSON *root = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
	int ok = root != NULL;

	cJSON_Delete(root);
	return ok;
}

enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out)
{
	struct reqbody_cursor s;
	enum reqbody_scan r;

	memset(out, 0, sizeof(*out));
	out->stream = -1;
	out->max_tokens = -1;
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
		if (reqbody_skip_ws(&s) == REQBODY_SCAN_EOF && reqbody_valid_json(body, len)) {
			if (out->stream < 0)
				out->stream = 0;
			return REQBODY_COMPLETE;
		}
	}
	memset(out, 0, sizeof(*out));
	out->max_tokens = -1;
	return REQBODY_INVALID;
}
