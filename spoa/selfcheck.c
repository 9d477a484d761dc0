/* selfcheck: tally-agent --self-check (see selfcheck.h). Main thread, run instead of a
 * start: no other thread exists. The first half reads HAProxy's configuration (pure);
 * the second runs the checks, touching files and sockets only to look. */
#include "selfcheck.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "db.h"
#include "gwsecret.h"
#include "keyhash.h"
#include "net.h"
#include "preflight.h"

#define SELFCHECK_MAX_NEST  64          /* nested .if blocks */
#define SELFCHECK_FILE_MAX  (8 << 20)   /* a configuration file read whole, at most */

static int selfcheck_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Formats into err; always -1. */
static int selfcheck_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Copies src into dst[cap], cut to fit. */
static void selfcheck_copy(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- splitting a line (HAProxy's parse_line) ---- */

struct selfcheck_split {
	struct selfcheck_words *out;
	size_t o;          /* bytes used in out->buf */
	int in_word;
};

static int selfcheck_word_start(struct selfcheck_split *sp)
{
	if (sp->in_word)
		return 0;
	if (sp->out->n == SELFCHECK_MAX_WORDS)
		return -1;
	sp->out->w[sp->out->n++] = sp->out->buf + sp->o;
	sp->in_word = 1;
	return 0;
}

/* A character of a word; one byte always stays free for the word's terminator. */
static int selfcheck_word_char(struct selfcheck_split *sp, char c)
{
	if (selfcheck_word_start(sp) < 0 || sp->o + 2 > sizeof(sp->out->buf))
		return -1;
	sp->out->buf[sp->o++] = c;
	return 0;
}

static void selfcheck_word_end(struct selfcheck_split *sp)
{
	if (sp->in_word)
		sp->out->buf[sp->o++] = '\0';
	sp->in_word = 0;
}

static int selfcheck_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A variable at *pp (just past its '$', inside double quotes): its value, or its
 * default, or nothing (unset: noted), emitted into the current word; ${NAME[*]} splits
 * the value into words at spaces. 0 or -1 with err. */
static int selfcheck_variable(struct selfcheck_split *sp, const char **pp, const char *end,
                              const struct selfcheck_env *env, char *err, size_t errlen)
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
		return selfcheck_err(err, errlen, "bad variable name after '$'");
	name_start = p;
	if (*p == '.')
		p++;
	while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
		p++;
	nlen = (size_t)(p - name_start);
	if (nlen >= sizeof(name))
		return selfcheck_err(err, errlen, "variable name too long");
	memcpy(name, name_start, nlen);
	name[nlen] = '\0';
	if (name[0] == '.') {
		if (strcmp(name, ".LINE") && strcmp(name, ".FILE") && strcmp(name, ".SECTION"))
			return selfcheck_err(err, errlen, "unknown pseudo-variable %s", name);
		value = "";
	} else {
		value = env->get(env->arg, name);
	}
	if (brace && p < end && *p == '[') {
		if (end - p < 3 || p[1] != '*' || p[2] != ']')
			return selfcheck_err(err, errlen, "bad word expansion in ${%s...}", name);
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
			return selfcheck_err(err, errlen, "unmatched brace in ${%s", name);
		p++;
	}
	*pp = p;
	if (!value && def) {
		size_t i;

		for (i = 0; i < deflen; i++)
			if (selfcheck_word_char(sp, def[i]) < 0)
				return selfcheck_err(err, errlen, "line too long once expanded");
		return 0;
	}
	if (!value) {
		if (!sp->out->unset[0])
			selfcheck_copy(sp->out->unset, sizeof(sp->out->unset), name);
		/* An unset variable still makes a word, an empty one. */
		if (!expand && selfcheck_word_start(sp) < 0)
			return selfcheck_err(err, errlen, "too many words");
		return 0;
	}
	for (; *value; value++) {
		if (expand && isspace((unsigned char)*value))
			selfcheck_word_end(sp);
		else if (selfcheck_word_char(sp, *value) < 0)
			return selfcheck_err(err, errlen, "line too long once expanded");
	}
	return 0;
}

int selfcheck_hap_words(const char *line, size_t len, const struct selfcheck_env *env,
                        struct selfcheck_words *out, char *err, size_t errlen)
{
	struct selfcheck_split sp = { .out = out };
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
				if (selfcheck_word_start(&sp) < 0)
					return selfcheck_err(err, errlen, "too many words");
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
				if (end - p < 4 || selfcheck_hex(p[2]) < 0 || selfcheck_hex(p[3]) < 0)
					return selfcheck_err(err, errlen, "bad \\x escape");
				send = (char)(selfcheck_hex(p[2]) << 4 | selfcheck_hex(p[3]));
				skip = 4;
			}
			if (selfcheck_word_char(&sp, send) < 0)
				return selfcheck_err(err, errlen, "line too long");
			p += skip;
		} else if (isspace((unsigned char)c) && !sq && !dq) {
			selfcheck_word_end(&sp);
			p++;
		} else if (c == '$' && dq) {
			p++;
			if (selfcheck_variable(&sp, &p, end, env, err, errlen) < 0)
				return -1;
		} else {
			if (selfcheck_word_char(&sp, c) < 0)
				return selfcheck_err(err, errlen, "line too long or too many words");
			p++;
		}
	}
	if (sq || dq)
		return selfcheck_err(err, errlen, "unterminated quote");
	selfcheck_word_end(&sp);
	return out->n;
}

/* ---- .if conditions, in three values ---- */

enum { SC_FALSE, SC_TRUE, SC_UNKNOWN };

static int selfcheck_not(int v)
{
	return v == SC_UNKNOWN ? v : !v;
}

static int selfcheck_and(int a, int b)
{
	if (a == SC_FALSE || b == SC_FALSE)
		return SC_FALSE;
	return a == SC_TRUE && b == SC_TRUE ? SC_TRUE : SC_UNKNOWN;
}

static int selfcheck_or(int a, int b)
{
	if (a == SC_TRUE || b == SC_TRUE)
		return SC_TRUE;
	return a == SC_FALSE && b == SC_FALSE ? SC_FALSE : SC_UNKNOWN;
}

struct selfcheck_cond {
	const char *p;
	const struct selfcheck_env *env;
	int bad;
};

static void selfcheck_cond_ws(struct selfcheck_cond *c)
{
	while (*c->p == ' ' || *c->p == '\t')
		c->p++;
}

static int selfcheck_cond_expr(struct selfcheck_cond *c, int depth);

/* NAME(ARG,...) at c->p: evaluated when it is one of the predicates that only need the
 * environment, SC_UNKNOWN for the others (and, with c->bad set, for what HAProxy would
 * not parse). */
static int selfcheck_cond_pred(struct selfcheck_cond *c)
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
		return SC_UNKNOWN;
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
				return SC_UNKNOWN;
			}
			if (alen >= sizeof(args[0])) {
				c->bad = 1;
				return SC_UNKNOWN;
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
		return c->env->get(c->env->arg, args[0]) ? SC_TRUE : SC_FALSE;
	if (strcmp(name, "streq") == 0 && nargs == 2)
		return strcmp(args[0], args[1]) == 0 ? SC_TRUE : SC_FALSE;
	if (strcmp(name, "strneq") == 0 && nargs == 2)
		return strcmp(args[0], args[1]) != 0 ? SC_TRUE : SC_FALSE;
	if (strcmp(name, "strstr") == 0 && nargs == 2)
		return strstr(args[0], args[1]) ? SC_TRUE : SC_FALSE;
	for (i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (strcmp(name, other[i]) == 0)
			return SC_UNKNOWN;
	c->bad = 1;
	return SC_UNKNOWN;
}

static int selfcheck_cond_term(struct selfcheck_cond *c, int depth)
{
	int neg = 0, v;
	char *end;
	long num;

	selfcheck_cond_ws(c);
	while (*c->p == '!') {
		neg = !neg;
		c->p++;
		selfcheck_cond_ws(c);
	}
	if (!*c->p || depth > SELFCHECK_MAX_NEST) {
		c->bad = 1;
		return SC_UNKNOWN;
	}
	num = strtol(c->p, &end, 0);
	if (end != c->p) {
		v = num ? SC_TRUE : SC_FALSE;
		c->p = end;
	} else if (*c->p == '(') {
		c->p++;
		v = selfcheck_cond_expr(c, depth + 1);
		selfcheck_cond_ws(c);
		if (*c->p == ')')
			c->p++;
		else
			c->bad = 1;
	} else {
		v = selfcheck_cond_pred(c);
	}
	selfcheck_cond_ws(c);
	return neg ? selfcheck_not(v) : v;
}

static int selfcheck_cond_and(struct selfcheck_cond *c, int depth)
{
	int v = selfcheck_cond_term(c, depth);

	while (!c->bad && c->p[0] == '&' && c->p[1] == '&') {
		c->p += 2;
		v = selfcheck_and(v, selfcheck_cond_term(c, depth));
	}
	return v;
}

static int selfcheck_cond_expr(struct selfcheck_cond *c, int depth)
{
	int v = selfcheck_cond_and(c, depth);

	while (!c->bad && c->p[0] == '|' && c->p[1] == '|') {
		c->p += 2;
		v = selfcheck_or(v, selfcheck_cond_and(c, depth));
	}
	return v;
}

/* The condition of an .if or .elif: HAProxy reads only the word after it. */
static int selfcheck_cond_eval(const char *text, const struct selfcheck_env *env)
{
	struct selfcheck_cond c = { .p = text, .env = env };
	int v;

	if (!*text)
		return SC_FALSE;
	v = selfcheck_cond_expr(&c, 0);
	selfcheck_cond_ws(&c);
	return c.bad || *c.p ? SC_UNKNOWN : v;
}

/* ---- walking a configuration ---- */

struct selfcheck_scan {
	const char *p, *end;
	int lineno;
	const struct selfcheck_env *env;
	int depth;
	signed char branch[SELFCHECK_MAX_NEST];   /* this branch is taken: SC_* */
	signed char taken[SELFCHECK_MAX_NEST];    /* an earlier or this branch was */
	int section_line;          /* the line just returned starts a section */
	char section[32];          /* the section's keyword, "" before any */
	char name[128];            /* its name */
	struct selfcheck_words words;
	char err[256];
};

static int selfcheck_is_section(const char *w)
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

static struct selfcheck_scan *selfcheck_scan_new(const char *text, size_t len,
                                                 const struct selfcheck_env *env)
{
	struct selfcheck_scan *s = calloc(1, sizeof(*s));

	if (s) {
		s->p = text;
		s->end = text + len;
		s->env = env;
	}
	return s;
}

/* SC_FALSE if some enclosing branch is surely not taken, SC_TRUE if all surely are. */
static int selfcheck_scan_active(const struct selfcheck_scan *s)
{
	int i, v = SC_TRUE;

	for (i = 0; i < s->depth; i++)
		v = selfcheck_and(v, s->branch[i]);
	return v;
}

/* One of .if, .elif, .else, .endif. 0 or -1 with s->err. */
static int selfcheck_scan_cond(struct selfcheck_scan *s, const char *kw, const char *cond)
{
	int top = s->depth - 1, v;

	if (strcmp(kw, ".if") == 0) {
		if (s->depth == SELFCHECK_MAX_NEST)
			return selfcheck_err(s->err, sizeof(s->err), "line %d: .if nested too deep",
			                     s->lineno);
		v = selfcheck_cond_eval(cond, s->env);
		s->branch[s->depth] = (signed char)v;
		s->taken[s->depth++] = (signed char)v;
		return 0;
	}
	if (top < 0)
		return selfcheck_err(s->err, sizeof(s->err), "line %d: %s without .if", s->lineno, kw);
	if (strcmp(kw, ".endif") == 0) {
		s->depth--;
		return 0;
	}
	if (strcmp(kw, ".elif") == 0) {
		v = s->taken[top] == SC_TRUE ? SC_FALSE : selfcheck_cond_eval(cond, s->env);
		if (s->taken[top] == SC_UNKNOWN && v == SC_TRUE)
			v = SC_UNKNOWN;
	} else {
		v = selfcheck_not(s->taken[top]);
	}
	s->branch[top] = (signed char)v;
	s->taken[top] = (signed char)selfcheck_or(s->taken[top], v);
	return 0;
}

/* The next line HAProxy may read, in s->words (section lines too, with
 * s->section_line set). 1, 0 at the end, -1 with s->err. */
static int selfcheck_scan_next(struct selfcheck_scan *s)
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
		active = selfcheck_scan_active(s);
		n = selfcheck_hap_words(line, len, s->env, &s->words, err, sizeof(err));
		if (n < 0) {
			if (active == SC_FALSE)
				continue;
			return selfcheck_err(s->err, sizeof(s->err), "line %d: %s", s->lineno, err);
		}
		if (n == 0)
			continue;
		w0 = s->words.w[0];
		if (strcmp(w0, ".if") == 0 || strcmp(w0, ".elif") == 0 || strcmp(w0, ".else") == 0 ||
		    strcmp(w0, ".endif") == 0) {
			if (selfcheck_scan_cond(s, w0, n > 1 ? s->words.w[1] : "") < 0)
				return -1;
			continue;
		}
		if (active == SC_FALSE)
			continue;
		if (strcmp(w0, ".alert") == 0 && active == SC_TRUE)
			return selfcheck_err(s->err, sizeof(s->err), "line %d: .alert %s (HAProxy "
			                     "refuses to start with this environment)", s->lineno,
			                     n > 1 ? s->words.w[1] : "");
		if (w0[0] == '.')
			continue;
		if (selfcheck_is_section(w0)) {
			s->section_line = 1;
			selfcheck_copy(s->section, sizeof(s->section), w0);
			selfcheck_copy(s->name, sizeof(s->name), n > 1 ? s->words.w[1] : "");
		}
		return 1;
	}
	if (s->depth)
		return selfcheck_err(s->err, sizeof(s->err), "an .if block has no .endif");
	return 0;
}

/* ---- addresses ---- */

/* host:port (brackets off) or a unix path from an address; 1 for a unix path, 0 for
 * host:port, -1 for anything else. port is -1 when there is none. */
static int selfcheck_addr_parse(const char *a, int agent, char *host, size_t cap, long *port)
{
	static const char *const prefixes[] = {
		"ipv4@", "ipv6@", "tcp@", "tcp4@", "tcp6@", "udp@", "udp4@", "udp6@",
	};
	const char *colon, *h;
	size_t i, hlen;
	char *end;

	*port = -1;
	if (agent ? strncmp(a, "unix:", 5) == 0 : strncmp(a, "unix@", 5) == 0) {
		selfcheck_copy(host, cap, a + 5);
		return 1;
	}
	if (!agent) {
		if (a[0] == '/') {
			selfcheck_copy(host, cap, a);
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

int selfcheck_addr_match(const char *agent, const char *hap)
{
	char ah[256], hh[256];
	long ap, hp;
	int ak = selfcheck_addr_parse(agent, 1, ah, sizeof(ah), &ap);
	int hk = selfcheck_addr_parse(hap, 0, hh, sizeof(hh), &hp);

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
static int selfcheck_listed(const char *list, const char *item)
{
	size_t n = strlen(item);
	const char *p;

	for (p = list; (p = strstr(p, item)); p++)
		if ((p == list || (p >= list + 2 && p[-2] == ',' && p[-1] == ' ')) &&
		    (p[n] == '\0' || p[n] == ','))
			return 1;
	return 0;
}

static void selfcheck_note_other(struct selfcheck_hap_found *out, const char *what)
{
	size_t used = strlen(out->others), n;

	if (!*what)
		what = "\"\"";
	n = strlen(what);
	if (selfcheck_listed(out->others, what))
		return;
	if (used + n + 2 + 4 >= sizeof(out->others)) {
		if (!strstr(out->others, "..."))
			snprintf(out->others + used, sizeof(out->others) - used, "%s...", used ? ", " : "");
		return;
	}
	snprintf(out->others + used, sizeof(out->others) - used, "%s%s", used ? ", " : "", what);
}

static int selfcheck_proxy(const char *section)
{
	return strcmp(section, "backend") == 0 || strcmp(section, "listen") == 0;
}

/* Whether a log line sends to ring@name: 1, 0, or -1 with err. */
static int selfcheck_ring_used(const char *text, size_t len, const char *name,
                               const struct selfcheck_env *env, char *err, size_t errlen)
{
	struct selfcheck_scan *s = selfcheck_scan_new(text, len, env);
	char target[160];
	int rc;

	if (!s)
		return selfcheck_err(err, errlen, "out of memory");
	snprintf(target, sizeof(target), "ring@%s", name);
	while ((rc = selfcheck_scan_next(s)) > 0)
		if (strcmp(s->words.w[0], "log") == 0 && s->words.n > 1 &&
		    strcmp(s->words.w[1], target) == 0)
			break;
	if (rc < 0)
		selfcheck_copy(err, errlen, s->err);
	free(s);
	return rc;
}

int selfcheck_hap_find(const char *text, size_t len, enum selfcheck_hap_what what,
                       const char *addr, const char *backend, const struct selfcheck_env *env,
                       struct selfcheck_hap_found *out)
{
	struct selfcheck_scan *s = selfcheck_scan_new(text, len, env);
	int rc, found = 0;

	memset(out, 0, sizeof(*out));
	if (!s)
		return selfcheck_err(out->err, sizeof(out->err), "out of memory");
	while ((rc = selfcheck_scan_next(s)) > 0) {
		const struct selfcheck_words *w = &s->words;
		const char *target, *server = "";

		if (s->section_line) {
			if (what == SELFCHECK_HAP_SERVER && backend && selfcheck_proxy(s->section) &&
			    strcmp(s->name, backend) == 0)
				out->section_seen = 1;
			continue;
		}
		if (what == SELFCHECK_HAP_LOG) {
			if (strcmp(w->w[0], "log") != 0 || w->n < 2 || strcmp(w->w[1], "global") == 0)
				continue;
			target = w->w[1];
		} else {
			if (what == SELFCHECK_HAP_SERVER ?
			    !selfcheck_proxy(s->section) || (backend && strcmp(s->name, backend) != 0) :
			    strcmp(s->section, "ring") != 0)
				continue;
			if (strcmp(w->w[0], "server") != 0 || w->n < 3)
				continue;
			server = w->w[1];
			target = w->w[2];
		}
		if (w->unset[0] && !out->unset[0])
			selfcheck_copy(out->unset, sizeof(out->unset), w->unset);
		if (!selfcheck_addr_match(addr, target)) {
			selfcheck_note_other(out, target);
			continue;
		}
		if (what == SELFCHECK_HAP_RING) {
			int used = selfcheck_ring_used(text, len, s->name, env, out->err, sizeof(out->err));

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
		selfcheck_copy(out->section, sizeof(out->section), s->name);
		selfcheck_copy(out->server, sizeof(out->server), server);
		if (what != SELFCHECK_HAP_RING || out->ring_used)
			break;
	}
	if (rc < 0 && !out->err[0])
		selfcheck_copy(out->err, sizeof(out->err), s->err);
	free(s);
	if (rc < 0)
		return -1;
	if (found)
		out->others[0] = '\0';
	return found;
}

int selfcheck_hap_spoe(const char *text, size_t len, const struct selfcheck_env *env,
                       struct selfcheck_spoe *out, int max, char *err, size_t errlen)
{
	struct selfcheck_scan *s = selfcheck_scan_new(text, len, env);
	int rc = 0, n = 0;

	if (!s)
		return selfcheck_err(err, errlen, "out of memory");
	while (n < max && (rc = selfcheck_scan_next(s)) > 0) {
		const struct selfcheck_words *w = &s->words;
		int i;

		if (s->section_line || strcmp(w->w[0], "filter") != 0 || w->n < 2 ||
		    strcmp(w->w[1], "spoe") != 0)
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		out[n].line = s->lineno;
		for (i = 2; i + 1 < w->n; i += 2) {
			if (strcmp(w->w[i], "engine") == 0)
				selfcheck_copy(out[n].engine, sizeof(out[n].engine), w->w[i + 1]);
			else if (strcmp(w->w[i], "config") == 0)
				selfcheck_copy(out[n].config, sizeof(out[n].config), w->w[i + 1]);
		}
		n++;
	}
	if (n < max && rc < 0) {
		selfcheck_copy(err, errlen, s->err);
		n = -1;
	}
	free(s);
	return n;
}

int selfcheck_spoe_backend(const char *text, size_t len, const char *engine,
                           const struct selfcheck_env *env, char *out, size_t cap, char *err,
                           size_t errlen)
{
	struct selfcheck_scan *s = selfcheck_scan_new(text, len, env);
	char scope[128] = "", section[32] = "";
	int rc = 0, found = 0, scoped = 0;

	if (!s)
		return selfcheck_err(err, errlen, "out of memory");
	while (!found && (rc = selfcheck_scan_next(s)) > 0) {
		const struct selfcheck_words *w = &s->words;
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
			selfcheck_copy(section, sizeof(section), w->w[0]);
			continue;
		}
		if (strcmp(section, "spoe-agent") == 0 && strcmp(w->w[0], "use-backend") == 0 &&
		    w->n > 1) {
			selfcheck_copy(out, cap, w->w[1]);
			found = 1;
		}
	}
	if (!found && rc < 0) {
		selfcheck_copy(err, errlen, s->err);
		found = -1;
	}
	free(s);
	return found;
}

/* ---- the checks ---- */

#define SELFCHECK_MAX_FDS (CONFIG_MAX_LISTEN + 4)

struct selfcheck {
	struct preflight p;
	const struct agent_config *cfg;
	int fds[SELFCHECK_MAX_FDS];   /* bound listeners, closed together at the end so that
	                               * two of the agent's own addresses that collide show */
	int nfds;
};

static const char *selfcheck_getenv(void *arg, const char *name)
{
	(void)arg;
	return getenv(name);
}

static const struct selfcheck_env selfcheck_environ = { selfcheck_getenv, NULL };

/* A TCP listener (udp 0) or UDP socket (udp 1) on host:port: bound, kept until the end.
 * UDP is bound without SO_REUSEADDR: a start would share the port with whoever holds
 * it (a running agent) and its records with it, so here that counts as in use. */
static void selfcheck_inet(struct selfcheck *sc, const char *what, const char *addr, int udp)
{
	char err[512];
	int fd = udp ? net_probe_udp(addr, err, sizeof(err)) : net_listen(addr, err, sizeof(err));

	if (fd < 0) {
		preflight_report(&sc->p, 0, "%s: %s", what, err);
		return;
	}
	if (sc->nfds < SELFCHECK_MAX_FDS)
		sc->fds[sc->nfds++] = fd;
	else
		close(fd);
	preflight_report(&sc->p, 1, "%s %s: can %s", what, addr, udp ? "bind" : "listen");
}

/* A unix socket the agent would listen on: never created or replaced here. A stale
 * socket (nothing answers) is what a start replaces; one that answers is in use. */
static void selfcheck_unix(struct selfcheck *sc, const char *what, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char copy[CONFIG_PATH_MAX];
	const char *dir;
	struct stat st;
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		preflight_report(&sc->p, 0, "%s %s: path too long for a unix socket (%zu bytes at "
		                 "most)", what, path, sizeof(sa.sun_path) - 1);
		return;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			preflight_report(&sc->p, 0, "%s %s: exists and is not a socket (a start "
			                 "refuses to replace it)", what, path);
			return;
		}
		strcpy(sa.sun_path, path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS)
			preflight_report(&sc->p, 0, "%s %s: in use (a process listens there: an agent "
			                 "already running?)", what, path);
		else if (errno == ECONNREFUSED)
			preflight_report(&sc->p, 1, "%s %s: stale socket, a start replaces it", what,
			                 path);
		else
			preflight_report(&sc->p, 0, "%s %s: %s", what, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	if (errno != ENOENT) {
		preflight_report(&sc->p, 0, "%s %s: %s", what, path, strerror(errno));
		return;
	}
	selfcheck_copy(copy, sizeof(copy), path);
	dir = dirname(copy);
	if (access(dir, W_OK | X_OK) < 0)
		preflight_report(&sc->p, 0, "%s %s: cannot create a socket in %s: %s", what, path,
		                 dir, strerror(errno));
	else
		preflight_report(&sc->p, 1, "%s %s: can be created", what, path);
}

static void selfcheck_listener(struct selfcheck *sc, const char *what, const char *addr)
{
	if (strncmp(addr, "unix:", 5) == 0)
		selfcheck_unix(sc, what, addr + 5);
	else
		selfcheck_inet(sc, what, addr, 0);
}

static void selfcheck_listeners(struct selfcheck *sc)
{
	const struct agent_config *cfg = sc->cfg;
	int i;

	for (i = 0; i < cfg->nlisten; i++)
		selfcheck_listener(sc, "SPOP listener", cfg->listen[i]);
	/* The records address must be host:port: UDP has no unix form here. */
	if (strncmp(cfg->records_addr, "unix:", 5) != 0)
		selfcheck_inet(sc, "records listener (TCP)", cfg->records_addr, 0);
	selfcheck_inet(sc, "records listener (UDP)", cfg->records_addr, 1);
	if (!cfg->metrics_addr[0])
		preflight_report(&sc->p, 1, "metrics listener: off");
	else if (strncmp(cfg->metrics_addr, "unix:", 5) == 0)
		preflight_report(&sc->p, 0, "metrics listener: must be host:port, not %s",
		                 cfg->metrics_addr);
	else
		selfcheck_inet(sc, "metrics listener", cfg->metrics_addr, 0);
	selfcheck_unix(sc, "control socket", cfg->control_path);
	while (sc->nfds > 0)
		close(sc->fds[--sc->nfds]);
}

/* The journal directory: there and writable, or creatable (a start makes it). */
static void selfcheck_journal(struct selfcheck *sc)
{
	const char *dir = sc->cfg->journal_dir, *parent;
	char copy[CONFIG_PATH_MAX];
	struct stat st;

	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			preflight_report(&sc->p, 0, "journal %s: not a directory", dir);
		else if (access(dir, W_OK | X_OK) < 0)
			preflight_report(&sc->p, 0, "journal %s: %s", dir, strerror(errno));
		else
			preflight_report(&sc->p, 1, "journal %s: writable", dir);
		return;
	}
	if (errno != ENOENT) {
		preflight_report(&sc->p, 0, "journal %s: %s", dir, strerror(errno));
		return;
	}
	selfcheck_copy(copy, sizeof(copy), dir);
	parent = dirname(copy);
	if (access(parent, W_OK | X_OK) < 0)
		preflight_report(&sc->p, 0, "journal %s: cannot be created in %s: %s", dir, parent,
		                 strerror(errno));
	else
		preflight_report(&sc->p, 1, "journal %s: absent, a start creates it", dir);
}

/* The key-hashing secret, by keyhash's own loading rules (never created here), then the
 * gateway secret: TALLY_GATEWAY_SECRET's, or the one derived from it. */
static void selfcheck_secrets(struct selfcheck *sc)
{
	const struct agent_config *cfg = sc->cfg;
	unsigned char secret[KEYHASH_SECRET_LEN];
	char path[CONFIG_PATH_MAX + 16], err[CONFIG_PATH_MAX + 256];
	struct gwsecret gw;
	struct stat st;
	int secret_ok = 0, from_env;

	if (keyhash_secret_path(cfg->secret_path, cfg->db_path, path, sizeof(path)) < 0)
		path[0] = '\0';
	if (!path[0])
		preflight_report(&sc->p, 0, "key-hashing secret: database path too long");
	else if (keyhash_secret_load(path, 0, secret, err, sizeof(err)) < 0)
		preflight_report(&sc->p, 0, "key-hashing secret: %s%s", err,
		                 !(lstat(path, &st) < 0 && errno == ENOENT) ? "" :
		                 db_is_postgres(cfg->db_path) ?
		                 " (a start on PostgreSQL refuses: copy the file every node and "
		                 "tallyctl share)" :
		                 " (a start would create a new one, and keys made under another "
		                 "would no longer match)");
	else
		secret_ok = preflight_report(&sc->p, 1, "key-hashing secret %s: private, %d bytes",
		                             path, KEYHASH_SECRET_LEN) == 0;
	from_env = gwsecret_from_env(&gw, err, sizeof(err));
	if (from_env < 0) {
		preflight_report(&sc->p, 0, "gateway secret (%s): %s", GWSECRET_ENV, err);
	} else if (from_env > 0) {
		preflight_report(&sc->p, 1, "gateway secret: from %s", GWSECRET_ENV);
	} else if (secret_ok) {
		preflight_report(&sc->p, 1, "gateway secret: derived from the key-hashing secret "
		                 "(tallyctl gateway-secret prints it for HAProxy)");
	} else {
		preflight_report(&sc->p, 0, "gateway secret: %s is not set and the key-hashing "
		                 "secret it would be derived from did not load", GWSECRET_ENV);
	}
	explicit_bzero(secret, sizeof(secret));
	explicit_bzero(&gw, sizeof(gw));
}

/* Reads a file whole (at most SELFCHECK_FILE_MAX). NULL with err. */
static char *selfcheck_read(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	size_t cap = 65536, n = 0;
	char *buf = NULL, *bigger;

	if (!f) {
		selfcheck_err(err, errlen, "%s", strerror(errno));
		return NULL;
	}
	for (;;) {
		if (!(bigger = realloc(buf, cap + 1))) {
			selfcheck_err(err, errlen, "out of memory");
			goto fail;
		}
		buf = bigger;
		n += fread(buf + n, 1, cap - n, f);
		if (ferror(f)) {
			selfcheck_err(err, errlen, "read error");
			goto fail;
		}
		if (n < cap)
			break;
		if (cap >= SELFCHECK_FILE_MAX) {
			selfcheck_err(err, errlen, "larger than %d MiB", SELFCHECK_FILE_MAX >> 20);
			goto fail;
		}
		cap *= 2;
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

/* An SPOE configuration named by a filter line: as given, else beside haproxy.cfg
 * (HAProxy reads a relative path from its own working directory). */
static char *selfcheck_read_spoe(const char *cfg_path, const char *spoe, char *used, size_t cap,
                                 size_t *len, char *err, size_t errlen)
{
	char dir[CONFIG_PATH_MAX], *text;

	selfcheck_copy(used, cap, spoe);
	if ((text = selfcheck_read(spoe, len, err, errlen)) || spoe[0] == '/')
		return text;
	selfcheck_copy(dir, sizeof(dir), cfg_path);
	snprintf(used, cap, "%s/%s", dirname(dir), spoe);   /* dirname's result, then copied */
	if ((text = selfcheck_read(used, len, err, errlen)))
		return text;
	selfcheck_copy(used, cap, spoe);
	return NULL;
}

/* " (NAME is not set here: ...)" when a looked-at line named an unset variable. */
static const char *selfcheck_unset_hint(const char *unset, char *buf, size_t cap)
{
	if (!unset[0])
		return "";
	snprintf(buf, cap, " (%s is not set here: run the check with HAProxy's environment)",
	         unset);
	return buf;
}

/* Joins the agent's SPOP addresses with " or ". */
static void selfcheck_spop_list(const struct agent_config *cfg, char *buf, size_t cap)
{
	size_t used = 0;
	int i;

	buf[0] = '\0';
	for (i = 0; i < cfg->nlisten && used < cap; i++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " or " : "",
		                         cfg->listen[i]);
}

/* Looks for any of the SPOP addresses in backend (NULL: any). 1, 0, -1. */
static int selfcheck_spop_in(const struct agent_config *cfg, const char *text, size_t len,
                             const char *backend, struct selfcheck_hap_found *f, char *addr,
                             size_t cap)
{
	struct selfcheck_hap_found miss;
	int i, rc;

	memset(&miss, 0, sizeof(miss));
	for (i = 0; i < cfg->nlisten; i++) {
		rc = selfcheck_hap_find(text, len, SELFCHECK_HAP_SERVER, cfg->listen[i], backend,
		                        &selfcheck_environ, f);
		if (rc != 0) {
			selfcheck_copy(addr, cap, cfg->listen[i]);
			return rc;
		}
		if (i == 0)
			miss = *f;
	}
	*f = miss;
	return 0;
}

/* The SPOP address, in the backend that the use-backend of the SPOE configuration of
 * a filter spoe line names (spoe[0..n)). */
static void selfcheck_hap_spop(struct selfcheck *sc, const char *path, const char *text,
                               size_t len, const struct selfcheck_spoe *spoe, int n)
{
	struct selfcheck_hap_found f;
	char err[512], backend[128] = "", from[CONFIG_PATH_MAX + 64] = "", addrs[512], addr[256];
	char hint[160], why[2 * CONFIG_PATH_MAX + 1024] = "";
	int i, rc = 0;

	memset(&f, 0, sizeof(f));
	if (n == 0) {
		preflight_report(&sc->p, 0, "%s: no 'filter spoe' line: HAProxy never asks the agent",
		                 path);
		return;
	}
	selfcheck_spop_list(sc->cfg, addrs, sizeof(addrs));
	for (i = 0; i < n && rc == 0; i++) {
		char used[CONFIG_PATH_MAX + 8], *spoe_text;
		size_t spoe_len;
		int brc;

		if (!spoe[i].config[0]) {
			snprintf(why, sizeof(why), "line %d's filter spoe names no config file",
			         spoe[i].line);
			continue;
		}
		spoe_text = selfcheck_read_spoe(path, spoe[i].config, used, sizeof(used), &spoe_len,
		                                err, sizeof(err));
		if (!spoe_text) {
			snprintf(why, sizeof(why), "cannot read %s: %s", used[0] ? used : "''", err);
			continue;
		}
		brc = selfcheck_spoe_backend(spoe_text, spoe_len, spoe[i].engine, &selfcheck_environ,
		                             backend, sizeof(backend), err, sizeof(err));
		free(spoe_text);
		if (brc <= 0) {
			snprintf(why, sizeof(why), "%s: %s", used, brc < 0 ? err :
			         "no use-backend in its spoe-agent");
			continue;
		}
		snprintf(from, sizeof(from), "use-backend of %s", used);
		rc = selfcheck_spop_in(sc->cfg, text, len, backend, &f, addr, sizeof(addr));
	}
	if (rc < 0) {
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	} else if (rc > 0) {
		preflight_report(&sc->p, 1, "%s: SPOP address %s is server %s of backend %s (%s, line "
		                 "%d)", path, addr, f.server, f.section, from, f.line);
	} else if (from[0]) {
		/* The last SPOE configuration read named a backend, and it lacks the agent. */
		if (!f.section_seen)
			preflight_report(&sc->p, 0, "%s: no backend %s (%s)", path, backend, from);
		else
			preflight_report(&sc->p, 0, "%s: backend %s (%s) has no server at %s (its "
			                 "servers: %s)%s", path, backend, from, addrs,
			                 f.others[0] ? f.others : "none",
			                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	} else {
		/* No SPOE configuration could be read here: any backend will do. */
		rc = selfcheck_spop_in(sc->cfg, text, len, NULL, &f, addr, sizeof(addr));
		if (rc < 0)
			preflight_report(&sc->p, 0, "%s: %s", path, f.err);
		else if (rc > 0)
			preflight_report(&sc->p, 1, "%s: SPOP address %s is server %s of backend %s "
			                 "(line %d; every backend searched: %s)", path, addr, f.server,
			                 f.section, f.line, why);
		else
			preflight_report(&sc->p, 0, "%s: no backend has a server at %s (servers: %s; %s)%s",
			                 path, addrs, f.others[0] ? f.others : "none", why,
			                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	}
}

/* The records address: a ring's server (TCP, used by a log line), and a log target. */
static void selfcheck_hap_records(struct selfcheck *sc, const char *path, const char *text,
                                  size_t len)
{
	const char *addr = sc->cfg->records_addr;
	struct selfcheck_hap_found f;
	char hint[160];
	int rc;

	rc = selfcheck_hap_find(text, len, SELFCHECK_HAP_RING, addr, NULL, &selfcheck_environ, &f);
	if (rc < 0)
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	else if (rc == 0)
		preflight_report(&sc->p, 0, "%s: records address %s is on no ring's server line (ring "
		                 "servers: %s)%s", path, addr, f.others[0] ? f.others : "none",
		                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	else if (!f.ring_used)
		preflight_report(&sc->p, 0, "%s: ring %s sends to records address %s (line %d) but no "
		                 "log line uses ring@%s", path, f.section, addr, f.line, f.section);
	else
		preflight_report(&sc->p, 1, "%s: records address %s is the server of ring %s (line %d),"
		                 " which a log line uses", path, addr, f.section, f.line);
	rc = selfcheck_hap_find(text, len, SELFCHECK_HAP_LOG, addr, NULL, &selfcheck_environ, &f);
	if (rc < 0)
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	else if (rc == 0)
		preflight_report(&sc->p, 0, "%s: records address %s is on no log line (log targets: "
		                 "%s)%s", path, addr, f.others[0] ? f.others : "none",
		                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	else
		preflight_report(&sc->p, 1, "%s: records address %s is a log target (line %d)", path,
		                 addr, f.line);
}

static void selfcheck_haproxy(struct selfcheck *sc)
{
	const char *path = sc->cfg->haproxy_cfg;
	struct selfcheck_spoe spoe[4];
	char err[512], *text;
	size_t len;
	int n;

	if (!path[0])
		return;
	if (!(text = selfcheck_read(path, &len, err, sizeof(err)))) {
		preflight_report(&sc->p, 0, "HAProxy configuration %s: %s", path, err);
		return;
	}
	/* This reads the whole file: a line HAProxy would refuse is reported once. */
	n = selfcheck_hap_spoe(text, len, &selfcheck_environ, spoe, 4, err, sizeof(err));
	if (n < 0) {
		preflight_report(&sc->p, 0, "HAProxy configuration %s: %s", path, err);
	} else {
		selfcheck_hap_spop(sc, path, text, len, spoe, n);
		selfcheck_hap_records(sc, path, text, len);
	}
	free(text);
}

int selfcheck_agent(FILE *out, const struct agent_config *cfg, const char *config_error)
{
	struct selfcheck sc = { .cfg = cfg };

	preflight_init(&sc.p, out);
	if (config_error) {
		preflight_report(&sc.p, 0, "configuration: %s", config_error);
		return preflight_finish(&sc.p, "tally-agent");
	}
	if (cfg->config_file[0])
		preflight_report(&sc.p, 1, "configuration: %s and the command line", cfg->config_file);
	else
		preflight_report(&sc.p, 1, "configuration: the command line (no --config)");
	preflight_db(&sc.p, cfg->db_path);
	selfcheck_secrets(&sc);
	selfcheck_journal(&sc);
	selfcheck_listeners(&sc);
	selfcheck_haproxy(&sc);
	return preflight_finish(&sc.p, "tally-agent");
}
