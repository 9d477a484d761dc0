/* haproxycfg: reading HAProxy's configuration as HAProxy reads it (see haproxycfg.h).
 * Pure: text in, answers out; no file is opened here. Main thread (tally-agent
 * --self-check, selfcheck.c), unit-tested by tests/unit/test_haproxycfg.c. */
#include "haproxycfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HAPROXYCFG_MAX_NEST  64          /* nested .if blocks */

static int haproxycfg_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Formats into err; always -1. */
static int haproxycfg_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Copies src into dst[cap], cut to fit. */
static void haproxycfg_copy(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- splitting a line (HAProxy's parse_line) ---- */

struct haproxycfg_splitter {
	struct haproxycfg_words *out;
	size_t o;          /* bytes used in out->buf */
	int in_word;
};

static int haproxycfg_word_start(struct haproxycfg_splitter *sp)
{
	if (sp->in_word)
		return 0;
	if (sp->out->n == HAPROXYCFG_MAX_WORDS)
		return -1;
	sp->out->w[sp->out->n++] = sp->out->buf + sp->o;
	sp->in_word = 1;
	return 0;
}

/* A character of a word; one byte always stays free for the word's terminator. */
static int haproxycfg_word_char(struct haproxycfg_splitter *sp, char c)
{
	if (haproxycfg_word_start(sp) < 0 || sp->o + 2 > sizeof(sp->out->buf))
		return -1;
	sp->out->buf[sp->o++] = c;
	return 0;
}

static void haproxycfg_word_end(struct haproxycfg_splitter *sp)
{
	if (sp->in_word)
		sp->out->buf[sp->o++] = '\0';
	sp->in_word = 0;
}

static int haproxycfg_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A variable at *pp (just past its '$', inside double quotes): its value, or its
 * default, or nothing (unset: noted), emitted into the current word; ${NAME[*]} splits
 * the value into words at spaces. 0 or -1 with err. */
static int haproxycfg_variable(struct haproxycfg_splitter *sp, const char **pp, const char *end,
                               const struct haproxycfg_env *env, char *err, size_t errlen)
{
	const char *p = *pp, *name_start, *value, *def = NULL;
	char name[128];
	size_t nlen, deflen = 0;
	int brace = 0, expand = 0;

	if (p < end && *p == '{') {
		brace = 1;
		p++;
	}
	if (p >= end || !(isalpha((unsigned char)*p) || *p == '_' || *p == '.'))
		return haproxycfg_err(err, errlen, "bad variable name after '$'");
	name_start = p;
	if (*p == '.')
		p++;
	while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
		p++;
	nlen = (size_t)(p - name_start);
	if (nlen >= sizeof(name))
		return haproxycfg_err(err, errlen, "variable name too long");
	memcpy(name, name_start, nlen);
	name[nlen] = '\0';
	if (name[0] == '.') {
		if (strcmp(name, ".LINE") && strcmp(name, ".FILE") && strcmp(name, ".SECTION"))
			return haproxycfg_err(err, errlen, "unknown pseudo-variable %s", name);
		value = "";
	} else {
		value = env->get(env->arg, name);
	}
	if (brace && p < end && *p == '[') {
		if (end - p < 3 || p[1] != '*' || p[2] != ']')
			return haproxycfg_err(err, errlen, "bad word expansion in ${%s...}", name);
		expand = 1;
		p += 3;
	}
	if (brace) {
		if (p < end && *p == '-') {
			def = ++p;
			while (p < end && *p != '}')
				p++;
			deflen = (size_t)(p - def);
		}
		if (p >= end || *p != '}')
			return haproxycfg_err(err, errlen, "unmatched brace in ${%s", name);
		p++;
	}
	*pp = p;
	if (!value && def) {
		size_t i;

		for (i = 0; i < deflen; i++)
			if (haproxycfg_word_char(sp, def[i]) < 0)
				return haproxycfg_err(err, errlen, "line too long once expanded");
		return 0;
	}
	if (!value) {
		if (!sp->out->unset[0])
			haproxycfg_copy(sp->out->unset, sizeof(sp->out->unset), name);
		/* An unset variable still makes a word, an empty one. */
		if (!expand && haproxycfg_word_start(sp) < 0)
			return haproxycfg_err(err, errlen, "too many words");
		return 0;
	}
	for (; *value; value++) {
		if (expand && isspace((unsigned char)*value))
			haproxycfg_word_end(sp);
		else if (haproxycfg_word_char(sp, *value) < 0)
			return haproxycfg_err(err, errlen, "line too long once expanded");
	}
	return 0;
}

int haproxycfg_split(const char *line, size_t len, const struct haproxycfg_env *env,
                     struct haproxycfg_words *out, char *err, size_t errlen)
{
	struct haproxycfg_splitter sp = { .out = out };
	const char *p = line, *end = line + len;
	int dq = 0, sq = 0;

	out->n = 0;
	out->unset[0] = '\0';
	while (p < end && *p != '\n' && *p != '\r' && *p != '\0') {
		char c = *p;

		if (c == '#' && !sq && !dq)
			break;
		if ((c == '"' && !sq) || (c == '\'' && !dq)) {
			/* An opening quote starts a word, so that "" is an empty one. */
			if (c == '"' ? !dq : !sq) {
				if (haproxycfg_word_start(&sp) < 0)
					return haproxycfg_err(err, errlen, "too many words");
			}
			if (c == '"')
				dq = !dq;
			else
				sq = !sq;
			p++;
		} else if (c == '\\' && !sq) {
			char send = '\\';
			int skip = 1;

			/* What HAProxy unescapes; any other backslash stays as it is. \$ only
			 * inside double quotes, where variables are. */
			if (p + 1 < end && strchr(" \\#'\"", p[1])) {
				send = p[1];
				skip = 2;
			} else if (p + 1 < end && (p[1] == 't' || p[1] == 'n' || p[1] == 'r')) {
				send = p[1] == 't' ? '\t' : p[1] == 'n' ? '\n' : '\r';
				skip = 2;
			} else if (p + 1 < end && p[1] == '$' && dq) {
				send = '$';
				skip = 2;
			} else if (p + 1 < end && p[1] == 'x') {
				if (end - p < 4 || haproxycfg_hex(p[2]) < 0 || haproxycfg_hex(p[3]) < 0)
					return haproxycfg_err(err, errlen, "bad \\x escape");
				send = (char)(haproxycfg_hex(p[2]) << 4 | haproxycfg_hex(p[3]));
				skip = 4;
			}
			if (haproxycfg_word_char(&sp, send) < 0)
				return haproxycfg_err(err, errlen, "line too long");
			p += skip;
		} else if (isspace((unsigned char)c) && !sq && !dq) {
			haproxycfg_word_end(&sp);
			p++;
		} else if (c == '$' && dq) {
			p++;
			if (haproxycfg_variable(&sp, &p, end, env, err, errlen) < 0)
				return -1;
		} else {
			if (haproxycfg_word_char(&sp, c) < 0)
				return haproxycfg_err(err, errlen, "line too long or too many words");
			p++;
		}
	}
	if (sq || dq)
		return haproxycfg_err(err, errlen, "unterminated quote");
	haproxycfg_word_end(&sp);
	return out->n;
}

/* ---- .if conditions, in three values ---- */

enum { HC_FALSE, HC_TRUE, HC_UNKNOWN };

static int haproxycfg_not(int v)
{
	return v == HC_UNKNOWN ? v : !v;
}

static int haproxycfg_and(int a, int b)
{
	if (a == HC_FALSE || b == HC_FALSE)
		return HC_FALSE;
	return a == HC_TRUE && b == HC_TRUE ? HC_TRUE : HC_UNKNOWN;
}

static int haproxycfg_or(int a, int b)
{
	if (a == HC_TRUE || b == HC_TRUE)
		return HC_TRUE;
	return a == HC_FALSE && b == HC_FALSE ? HC_FALSE : HC_UNKNOWN;
}

struct haproxycfg_cond {
	const char *p;
	const struct haproxycfg_env *env;
	int bad;
};

static void haproxycfg_cond_ws(struct haproxycfg_cond *c)
{
	while (*c->p == ' ' || *c->p == '\t')
		c->p++;
}

static int haproxycfg_cond_expr(struct haproxycfg_cond *c, int depth);

/* NAME(ARG,...) at c->p: evaluated when it is one of the predicates that only need the
 * environment, HC_UNKNOWN for the others (and, with c->bad set, for what HAProxy would
 * not parse). */
static int haproxycfg_cond_pred(struct haproxycfg_cond *c)
{
	static const char *const other[] = {
		"feature", "version_atleast", "version_before", "openssl_version_atleast",
		"openssl_version_before", "ssllib_name_startswith", "awslc_api_atleast",
		"awslc_api_before", "enabled", "fips_mode",
	};
	char name[32], args[2][1024];
	size_t n = strspn(c->p, "abcdefghijklmnopqrstuvwxyz_"), i;
	int nargs = 0;

	if (n == 0 || n >= sizeof(name)) {
		c->bad = 1;
		return HC_UNKNOWN;
	}
	memcpy(name, c->p, n);
	name[n] = '\0';
	c->p += n;
	if (*c->p == '(') {
		c->p++;
		for (;;) {
			size_t alen = strcspn(c->p, ",)");

			if (!c->p[alen]) {
				c->bad = 1;
				return HC_UNKNOWN;
			}
			if (alen >= sizeof(args[0])) {
				c->bad = 1;
				return HC_UNKNOWN;
			}
			if (nargs < 2) {
				memcpy(args[nargs], c->p, alen);
				args[nargs][alen] = '\0';
			}
			nargs++;
			c->p += alen + 1;
			if (c->p[-1] == ')')
				break;
		}
	}
	if (strcmp(name, "defined") == 0 && nargs == 1)
		return c->env->get(c->env->arg, args[0]) ? HC_TRUE : HC_FALSE;
	if (strcmp(name, "streq") == 0 && nargs == 2)
		return strcmp(args[0], args[1]) == 0 ? HC_TRUE : HC_FALSE;
	if (strcmp(name, "strneq") == 0 && nargs == 2)
		return strcmp(args[0], args[1]) != 0 ? HC_TRUE : HC_FALSE;
	if (strcmp(name, "strstr") == 0 && nargs == 2)
		return strstr(args[0], args[1]) ? HC_TRUE : HC_FALSE;
	for (i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (strcmp(name, other[i]) == 0)
			return HC_UNKNOWN;
	c->bad = 1;
	return HC_UNKNOWN;
}

static int haproxycfg_cond_term(struct haproxycfg_cond *c, int depth)
{
	int neg = 0, v;
	char *end;
	long num;

	haproxycfg_cond_ws(c);
	while (*c->p == '!') {
		neg = !neg;
		c->p++;
		haproxycfg_cond_ws(c);
	}
	if (!*c->p || depth > HAPROXYCFG_MAX_NEST) {
		c->bad = 1;
		return HC_UNKNOWN;
	}
	num = strtol(c->p, &end, 0);
	if (end != c->p) {
		v = num ? HC_TRUE : HC_FALSE;
		c->p = end;
	} else if (*c->p == '(') {
		c->p++;
		v = haproxycfg_cond_expr(c, depth + 1);
		haproxycfg_cond_ws(c);
		if (*c->p == ')')
			c->p++;
		else
			c->bad = 1;
	} else {
		v = haproxycfg_cond_pred(c);
	}
	haproxycfg_cond_ws(c);
	return neg ? haproxycfg_not(v) : v;
}

static int haproxycfg_cond_and(struct haproxycfg_cond *c, int depth)
{
	int v = haproxycfg_cond_term(c, depth);

	while (!c->bad && c->p[0] == '&' && c->p[1] == '&') {
		c->p += 2;
		v = haproxycfg_and(v, haproxycfg_cond_term(c, depth));
	}
	return v;
}

static int haproxycfg_cond_expr(struct haproxycfg_cond *c, int depth)
{
	int v = haproxycfg_cond_and(c, depth);

	while (!c->bad && c->p[0] == '|' && c->p[1] == '|') {
		c->p += 2;
		v = haproxycfg_or(v, haproxycfg_cond_and(c, depth));
	}
	return v;
}

/* The condition of an .if or .elif: HAProxy reads only the word after it. */
static int haproxycfg_cond_eval(const char *text, const struct haproxycfg_env *env)
{
	struct haproxycfg_cond c = { .p = text, .env = env };
	int v;

	if (!*text)
		return HC_FALSE;
	v = haproxycfg_cond_expr(&c, 0);
	haproxycfg_cond_ws(&c);
	return c.bad || *c.p ? HC_UNKNOWN : v;
}

/* ---- walking a configuration ---- */

struct haproxycfg_scan {
	const char *p, *end;
	int lineno;
	const struct haproxycfg_env *env;
	int depth;
	signed char branch[HAPROXYCFG_MAX_NEST];   /* this branch is taken: SC_* */
	signed char taken[HAPROXYCFG_MAX_NEST];    /* an earlier or this branch was */
	int section_line;          /* the line just returned starts a section */
	char section[32];          /* the section's keyword, "" before any */
	char name[128];            /* its name */
	struct haproxycfg_words words;
	char err[256];
};

static int haproxycfg_is_section(const char *w)
{
	static const char *const sections[] = {
		"global", "defaults", "frontend", "backend", "listen", "ring", "peers", "resolvers",
		"userlist", "mailers", "program", "http-errors", "cache", "log-forward", "crt-store",
		"traces", "acme", "fcgi-app", "namespace_list",
	};
	size_t i;

	for (i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		if (strcmp(w, sections[i]) == 0)
			return 1;
	return 0;
}

static struct haproxycfg_scan *haproxycfg_scan_new(const char *text, size_t len,
                                                   const struct haproxycfg_env *env)
{
	struct haproxycfg_scan *s = calloc(1, sizeof(*s));

	if (s) {
		s->p = text;
		s->end = text + len;
		s->env = env;
	}
	return s;
}

/* HC_FALSE if some enclosing branch is surely not taken, HC_TRUE if all surely are. */
static int haproxycfg_scan_active(const struct haproxycfg_scan *s)
{
	int i, v = HC_TRUE;

	for (i = 0; i < s->depth; i++)
		v = haproxycfg_and(v, s->branch[i]);
	return v;
}

/* One of .if, .elif, .else, .endif. 0 or -1 with s->err. */
static int haproxycfg_scan_cond(struct haproxycfg_scan *s, const char *kw, const char *cond)
{
	int top = s->depth - 1, v;

	if (strcmp(kw, ".if") == 0) {
		if (s->depth == HAPROXYCFG_MAX_NEST)
			return haproxycfg_err(s->err, sizeof(s->err), "line %d: .if nested too deep",
			                      s->lineno);
		v = haproxycfg_cond_eval(cond, s->env);
		s->branch[s->depth] = (signed char)v;
		s->taken[s->depth++] = (signed char)v;
		return 0;
	}
	if (top < 0)
		return haproxycfg_err(s->err, sizeof(s->err), "line %d: %s without .if", s->lineno, kw);
	if (strcmp(kw, ".endif") == 0) {
		s->depth--;
		return 0;
	}
	if (strcmp(kw, ".elif") == 0) {
		v = s->taken[top] == HC_TRUE ? HC_FALSE : haproxycfg_cond_eval(cond, s->env);
		if (s->taken[top] == HC_UNKNOWN && v == HC_TRUE)
			v = HC_UNKNOWN;
	} else {
		v = haproxycfg_not(s->taken[top]);
	}
	s->branch[top] = (signed char)v;
	s->taken[top] = (signed char)haproxycfg_or(s->taken[top], v);
	return 0;
}

/* The next line HAProxy may read, in s->words (section lines too, with
 * s->section_line set). 1, 0 at the end, -1 with s->err. */
static int haproxycfg_scan_next(struct haproxycfg_scan *s)
{
	while (s->p < s->end) {
		const char *line = s->p, *nl = memchr(line, '\n', (size_t)(s->end - line));
		size_t len = nl ? (size_t)(nl - line) : (size_t)(s->end - line);
		const char *w0;
		char err[200];
		int n, active;

		s->p = nl ? nl + 1 : s->end;
		s->lineno++;
		s->section_line = 0;
		active = haproxycfg_scan_active(s);
		n = haproxycfg_split(line, len, s->env, &s->words, err, sizeof(err));
		if (n < 0) {
			if (active == HC_FALSE)
				continue;
			return haproxycfg_err(s->err, sizeof(s->err), "line %d: %s", s->lineno, err);
		}
		if (n == 0)
			continue;
		w0 = s->words.w[0];
		if (strcmp(w0, ".if") == 0 || strcmp(w0, ".elif") == 0 || strcmp(w0, ".else") == 0 ||
		    strcmp(w0, ".endif") == 0) {
			if (haproxycfg_scan_cond(s, w0, n > 1 ? s->words.w[1] : "") < 0)
				return -1;
			continue;
		}
		if (active == HC_FALSE)
			continue;
		if (strcmp(w0, ".alert") == 0 && active == HC_TRUE)
			return haproxycfg_err(s->err, sizeof(s->err), "line %d: .alert %s (HAProxy "
			                      "refuses to start with this environment)", s->lineno,
			                      n > 1 ? s->words.w[1] : "");
		if (w0[0] == '.')
			continue;
		if (haproxycfg_is_section(w0)) {
			s->section_line = 1;
			haproxycfg_copy(s->section, sizeof(s->section), w0);
			haproxycfg_copy(s->name, sizeof(s->name), n > 1 ? s->words.w[1] : "");
		}
		return 1;
	}
	if (s->depth)
		return haproxycfg_err(s->err, sizeof(s->err), "an .if block has no .endif");
	return 0;
}

/* ---- addresses ---- */

/* host:port (brackets off) or a unix path from an address; 1 for a unix path, 0 for
 * host:port, -1 for anything else. port is -1 when there is none. */
static int haproxycfg_addr_parse(const char *a, int agent, char *host, size_t cap, long *port)
{
	static const char *const prefixes[] = {
		"ipv4@", "ipv6@", "tcp@", "tcp4@", "tcp6@", "udp@", "udp4@", "udp6@",
	};
	const char *colon, *h;
	size_t i, hlen;
	char *end;

	*port = -1;
	if (agent ? strncmp(a, "unix:", 5) == 0 : strncmp(a, "unix@", 5) == 0) {
		haproxycfg_copy(host, cap, a + 5);
		return 1;
	}
	if (!agent) {
		if (a[0] == '/') {
			haproxycfg_copy(host, cap, a);
			return 1;
		}
		for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
			if (strncasecmp(a, prefixes[i], strlen(prefixes[i])) == 0) {
				a += strlen(prefixes[i]);
				break;
			}
		}
		if (strchr(a, '@') || a[0] == '/')
			return -1;
	}
	colon = strrchr(a, ':');
	/* "[v6]" alone, or a bare IPv6 address, has no port after its last colon. */
	if (colon && a[0] == '[' && colon < strchr(a, ']'))
		colon = NULL;
	if (colon && !agent && a[0] != '[' && strchr(a, ':') != colon &&
	    !(colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)))
		colon = NULL;
	h = a;
	hlen = colon ? (size_t)(colon - a) : strlen(a);
	if (colon) {
		errno = 0;
		*port = strtol(colon + 1, &end, 10);
		if (errno || end == colon + 1 || *end || *port < 0 || *port > 65535)
			return -1;
	} else if (agent) {
		return -1;
	}
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen >= cap)
		return -1;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	return 0;
}

int haproxycfg_addr_match(const char *agent, const char *hap)
{
	char ah[256], hh[256];
	long ap, hp;
	int ak = haproxycfg_addr_parse(agent, 1, ah, sizeof(ah), &ap);
	int hk = haproxycfg_addr_parse(hap, 0, hh, sizeof(hh), &hp);

	if (ak < 0 || hk < 0 || ak != hk)
		return 0;
	if (ak == 1)
		return strcmp(ah, hh) == 0;
	if (hp < 0)
		hp = 514;
	if (ap != hp)
		return 0;
	return !ah[0] || strcmp(ah, "0.0.0.0") == 0 || strcmp(ah, "::") == 0 ||
	       strcmp(ah, "*") == 0 || strcasecmp(ah, hh) == 0;
}

/* ---- finding addresses ---- */

/* 1 if list (entries joined by ", ") holds item. */
static int haproxycfg_listed(const char *list, const char *item)
{
	size_t n = strlen(item);
	const char *p;

	for (p = list; (p = strstr(p, item)); p++)
		if ((p == list || (p >= list + 2 && p[-2] == ',' && p[-1] == ' ')) &&
		    (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

static void haproxycfg_note_other(struct haproxycfg_found *out, const char *what)
{
	size_t used = strlen(out->others), n;

	if (!*what)
		what = "\"\"";
	n = strlen(what);
	if (haproxycfg_listed(out->others, what))
		return;
	if (used + n + 2 + 4 >= sizeof(out->others)) {
		if (!strstr(out->others, "..."))
			snprintf(out->others + used, sizeof(out->others) - used, "%s...", used ? ", " : "");
		return;
	}
	snprintf(out->others + used, sizeof(out->others) - used, "%s%s", used ? ", " : "", what);
}

static int haproxycfg_proxy(const char *section)
{
	return strcmp(section, "backend") == 0 || strcmp(section, "listen") == 0;
}

/* Whether a log line sends to ring@name: 1, 0, or -1 with err. */
static int haproxycfg_ring_used(const char *text, size_t len, const char *name,
                                const struct haproxycfg_env *env, char *err, size_t errlen)
{
	struct haproxycfg_scan *s = haproxycfg_scan_new(text, len, env);
	char target[160];
	int rc;

	if (!s)
		return haproxycfg_err(err, errlen, "out of memory");
	snprintf(target, sizeof(target), "ring@%s", name);
	while ((rc = haproxycfg_scan_next(s)) > 0)
		if (strcmp(s->words.w[0], "log") == 0 && s->words.n > 1 &&
		    strcmp(s->words.w[1], target) == 0)
			break;
	if (rc < 0)
		haproxycfg_copy(err, errlen, s->err);
	free(s);
	return rc;
}

int haproxycfg_find(const char *text, size_t len, enum haproxycfg_what what,
                    const char *addr, const char *backend, const struct haproxycfg_env *env,
                    struct haproxycfg_found *out)
{
	struct haproxycfg_scan *s = haproxycfg_scan_new(text, len, env);
	int rc, found = 0;

	memset(out, 0, sizeof(*out));
	if (!s)
		return haproxycfg_err(out->err, sizeof(out->err), "out of memory");
	while ((rc = haproxycfg_scan_next(s)) > 0) {
		const struct haproxycfg_words *w = &s->words;
		const char *target, *server = "";

		if (s->section_line) {
			if (what == HAPROXYCFG_SERVER && backend && haproxycfg_proxy(s->section) &&
			    strcmp(s->name, backend) == 0)
				out->section_seen = 1;
			continue;
		}
		if (what == HAPROXYCFG_LOG) {
			if (strcmp(w->w[0], "log") != 0 || w->n < 2 || strcmp(w->w[1], "global") == 0)
				continue;
			target = w->w[1];
		} else {
			if (what == HAPROXYCFG_SERVER ?
			    !haproxycfg_proxy(s->section) || (backend && strcmp(s->name, backend) != 0) :
			    strcmp(s->section, "ring") != 0)
				continue;
			if (strcmp(w->w[0], "server") != 0 || w->n < 3)
				continue;
			server = w->w[1];
			target = w->w[2];
		}
		if (w->unset[0] && !out->unset[0])
			haproxycfg_copy(out->unset, sizeof(out->unset), w->unset);
		if (!haproxycfg_addr_match(addr, target)) {
			haproxycfg_note_other(out, target);
			continue;
		}
		if (what == HAPROXYCFG_RING) {
			int used = haproxycfg_ring_used(text, len, s->name, env, out->err, sizeof(out->err));

			if (used < 0) {
				rc = -1;
				break;
			}
			/* A ring no log line uses only stands until a used one turns up. */
			if (found && !used)
				continue;
			out->ring_used = used;
		}
		found = 1;
		out->line = s->lineno;
		haproxycfg_copy(out->section, sizeof(out->section), s->name);
		haproxycfg_copy(out->server, sizeof(out->server), server);
		if (what != HAPROXYCFG_RING || out->ring_used)
			break;
	}
	if (rc < 0 && !out->err[0])
		haproxycfg_copy(out->err, sizeof(out->err), s->err);
	free(s);
	if (rc < 0)
		return -1;
	if (found)
		out->others[0] = '\0';
	return found;
}

int haproxycfg_spoe_filters(const char *text, size_t len, const struct haproxycfg_env *env,
                            struct haproxycfg_spoe *out, int max, char *err, size_t errlen)
{
	struct haproxycfg_scan *s = haproxycfg_scan_new(text, len, env);
	int rc = 0, n = 0;

	if (!s)
		return haproxycfg_err(err, errlen, "out of memory");
	while (n < max && (rc = haproxycfg_scan_next(s)) > 0) {
		const struct haproxycfg_words *w = &s->words;
		int i;

		if (s->section_line || strcmp(w->w[0], "filter") != 0 || w->n < 2 ||
		    strcmp(w->w[1], "spoe") != 0)
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		out[n].line = s->lineno;
		for (i = 2; i + 1 < w->n; i += 2) {
			if (strcmp(w->w[i], "engine") == 0)
				haproxycfg_copy(out[n].engine, sizeof(out[n].engine), w->w[i + 1]);
			else if (strcmp(w->w[i], "config") == 0)
				haproxycfg_copy(out[n].config, sizeof(out[n].config), w->w[i + 1]);
		}
		n++;
	}
	if (n < max && rc < 0) {
		haproxycfg_copy(err, errlen, s->err);
		n = -1;
	}
	free(s);
	return n;
}

int haproxycfg_spoe_backend(const char *text, size_t len, const char *engine,
                            const struct haproxycfg_env *env, char *out, size_t cap, char *err,
                            size_t errlen)
{
	struct haproxycfg_scan *s = haproxycfg_scan_new(text, len, env);
	char scope[128] = "", section[32] = "";
	int rc = 0, found = 0, scoped = 0;

	if (!s)
		return haproxycfg_err(err, errlen, "out of memory");
	while (!found && (rc = haproxycfg_scan_next(s)) > 0) {
		const struct haproxycfg_words *w = &s->words;
		size_t n = strlen(w->w[0]);

		if (n >= 2 && w->w[0][0] == '[' && w->w[0][n - 1] == ']') {
			scoped = 1;
			snprintf(scope, sizeof(scope), "%.*s", (int)(n - 2), w->w[0] + 1);
			continue;
		}
		/* HAProxy's rule: no engine, no scope; an engine, its scope only. */
		if (engine[0] ? !scoped || strcmp(scope, engine) != 0 : scoped)
			continue;
		if (strncmp(w->w[0], "spoe-", 5) == 0) {
			haproxycfg_copy(section, sizeof(section), w->w[0]);
			continue;
		}
		if (strcmp(section, "spoe-agent") == 0 && strcmp(w->w[0], "use-backend") == 0 &&
		    w->n > 1) {
			haproxycfg_copy(out, cap, w->w[1]);
			found = 1;
		}
	}
	if (!found && rc < 0) {
		haproxycfg_copy(err, errlen, s->err);
		found = -1;
	}
	free(s);
	return found;
}
