/* tz: TZif zones and local periods (see tz.h). Parsing and arithmetic are pure; the
 * cache of tz_get is a list under a mutex, appended to and never freed (at most one
 * entry per zone name and tzdata version the process met). */
#include "tz.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_DAY_S        86400
#define TZ_OFFSET_MIN   (-89999)      /* RFC 8536: utoff within (-25 h, 26 h) */
#define TZ_OFFSET_MAX   93599
#define TZ_HEADER_LEN   44

/* A footer's rule for the day DST starts or ends: Jn (1..365, February 29 never
 * counted), n (0..365) or Mm.w.d, at time seconds after that day's local midnight. */
struct tz_rule {
	char kind;                    /* 'J', 'n' or 'M' */
	int day, week, month;
	int32_t time;
};

struct tz {
	char name[TZ_NAME_MAX + 1];
	size_t n;                     /* transitions */
	int64_t *at;                  /* their instants, unix seconds, ascending */
	int32_t *off;                 /* the offset from each on */
	int32_t first_off;            /* before the first (time type 0) */
	int footer;                   /* after the last: the footer's rule, else the last offset */
	int dst;                      /* the footer has daylight time */
	int32_t std_off, dst_off;
	struct tz_rule start, end;
};

static uint32_t tz_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t tz_be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)tz_be32(p) << 32 | tz_be32(p + 4));
}

/* The six counts of a header at p: isut, isstd, leap, time, type, char. */
static void tz_counts(const unsigned char *p, uint64_t c[6])
{
	for (int i = 0; i < 6; i++)
		c[i] = tz_be32(p + 20 + 4 * i);
}

/* Bytes of the data block after a header with counts c, times of tlen bytes. */
static uint64_t tz_block_len(const uint64_t c[6], uint64_t tlen)
{
	return c[3] * (tlen + 1) + c[4] * 6 + c[5] + c[2] * (tlen + 4) + c[1] + c[0];
}

/* Reads a POSIX TZ string's number of at most max, digits only; -1 if none or past max. */
static int tz_num(const char **s, int max)
{
	int v = 0, digits = 0;

	while (**s >= '0' && **s <= '9' && digits < 4) {
		v = v * 10 + (*(*s)++ - '0');
		digits++;
	}
	return digits && v <= max ? v : -1;
}

/* [+-]hh[:mm[:ss]], hh at most max_h; 0, or -1. */
static int tz_hms(const char **s, int max_h, int32_t *out)
{
	int sign = 1, h, m = 0, sec = 0;

	if (**s == '+' || **s == '-')
		sign = *(*s)++ == '-' ? -1 : 1;
	if ((h = tz_num(s, max_h)) < 0)
		return -1;
	if (**s == ':') {
		(*s)++;
		if ((m = tz_num(s, 59)) < 0)
			return -1;
		if (**s == ':') {
			(*s)++;
			if ((sec = tz_num(s, 59)) < 0)
				return -1;
		}
	}
	*out = sign * (h * 3600 + m * 60 + sec);
	return 0;
}

/* A zone abbreviation: three or more letters, or <...> of letters, digits, + and -. */
static int tz_abbr(const char **s)
{
	const char *p = *s;
	int quoted = *p == '<';

	if (quoted)
		p++;
	while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
	       (quoted && ((*p >= '0' && *p <= '9') || *p == '+' || *p == '-')))
		p++;
	if (p - *s - quoted < 3 || (quoted && *p++ != '>'))
		return -1;
	*s = p;
	return 0;
}

static int tz_rule_parse(const char **s, struct tz_rule *r)
{
	r->time = 7200;
	if (**s == 'J') {
		(*s)++;
		r->kind = 'J';
		if ((r->day = tz_num(s, 365)) < 1)
			return -1;
	} else if (**s == 'M') {
		(*s)++;
		r->kind = 'M';
		if ((r->month = tz_num(s, 12)) < 1 || *(*s)++ != '.' ||
		    (r->week = tz_num(s, 5)) < 1 || *(*s)++ != '.' || (r->day = tz_num(s, 6)) < 0)
			return -1;
	} else {
		r->kind = 'n';
		if ((r->day = tz_num(s, 365)) < 0)
			return -1;
	}
	if (**s == '/') {
		(*s)++;
		return tz_hms(s, 167, &r->time);
	}
	return 0;
}

/* The footer: std offset [dst [offset] ,start[/time],end[/time]]. POSIX offsets count
 * west, RFC 8536's utoff east. */
static int tz_footer_parse(struct tz *z, const char *s)
{
	int32_t o;

	if (tz_abbr(&s) < 0 || tz_hms(&s, 24, &o) < 0)
		return -1;
	z->std_off = -o;
	z->dst_off = z->std_off + 3600;
	if (*s) {
		z->dst = 1;
		if (tz_abbr(&s) < 0)
			return -1;
		if (*s != ',') {
			if (tz_hms(&s, 24, &o) < 0)
				return -1;
			z->dst_off = -o;
		}
		if (*s++ != ',' || tz_rule_parse(&s, &z->start) < 0 || *s++ != ',' ||
		    tz_rule_parse(&s, &z->end) < 0)
			return -1;
	}
	z->footer = 1;
	return *s ? -1 : 0;
}

struct tz *tz_parse(const unsigned char *buf, size_t len)
{
	uint64_t c[6], v1, need, p;
	const unsigned char *idx, *types;
	struct tz *z = NULL;
	char footer[256];
	size_t i, flen;

	if (len < TZ_HEADER_LEN || memcmp(buf, "TZif", 4) != 0 || buf[4] < '2')
		return NULL;
	tz_counts(buf, c);
	v1 = TZ_HEADER_LEN + tz_block_len(c, 4);
	if (v1 + TZ_HEADER_LEN > len || memcmp(buf + v1, "TZif", 4) != 0)
		return NULL;
	tz_counts(buf + v1, c);
	p = v1 + TZ_HEADER_LEN;
	need = tz_block_len(c, 8);
	/* Leap seconds would shift every boundary; isstd/isut are either absent or one
	 * per type; a zone has at least one type and at most 256 (one byte indexes them). */
	if (c[2] != 0 || c[4] == 0 || c[4] > 256 || c[5] == 0 || (c[1] && c[1] != c[4]) ||
	    (c[0] && c[0] != c[4]) || need > len - p)
		return NULL;
	if (!(z = calloc(1, sizeof(*z))) ||
	    (c[3] && (!(z->at = malloc(c[3] * sizeof(*z->at))) ||
	              !(z->off = malloc(c[3] * sizeof(*z->off))))))
		goto fail;
	idx = buf + p + c[3] * 8;
	types = idx + c[3];
	for (i = 0; i < c[4]; i++) {
		int32_t o = (int32_t)tz_be32(types + 6 * i);

		if (o < TZ_OFFSET_MIN || o > TZ_OFFSET_MAX || types[6 * i + 5] >= c[5])
			goto fail;
	}
	z->first_off = (int32_t)tz_be32(types);
	for (i = 0; i < c[3]; i++) {
		z->at[i] = tz_be64(buf + p + 8 * i);
		if (idx[i] >= c[4] || (i && z->at[i] <= z->at[i - 1]))
			goto fail;
		z->off[i] = (int32_t)tz_be32(types + 6 * idx[i]);
	}
	z->n = c[3];
	/* The footer: a newline, a TZ string (empty: none), a newline, and nothing after. */
	p += need;
	if (p >= len || buf[p] != '\n')
		goto fail;
	for (flen = 0; p + 1 + flen < len && buf[p + 1 + flen] != '\n'; flen++)
		;
	if (p + 1 + flen != len - 1 || flen >= sizeof(footer) ||
	    memchr(buf + p + 1, '\0', flen))
		goto fail;
	memcpy(footer, buf + p + 1, flen);
	footer[flen] = '\0';
	if (flen && tz_footer_parse(z, footer) < 0)
		goto fail;
	return z;
fail:
	tz_free(z);
	return NULL;
}

void tz_free(struct tz *z)
{
	if (!z)
		return;
	free(z->at);
	free(z->off);
	free(z);
}

const char *tz_name(const struct tz *z)
{
	return z->name;
}

int tz_name_ok(const char *name)
{
	size_t len = strlen(name), i, comp = 0;

	if (len == 0 || len > TZ_NAME_MAX || name[0] == '/' || name[0] == '.')
		return 0;
	for (i = 0; i <= len; i++) {
		char ch = name[i];

		if (ch == '/' || ch == '\0') {
			/* a component: not empty, ".", or ".." */
			if (comp == 0 || (comp <= 2 && strncmp(name + i - comp, "..", comp) == 0))
				return 0;
			comp = 0;
		} else if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		           (ch >= '0' && ch <= '9') || ch == '_' || ch == '+' || ch == '-' ||
		           ch == '.') {
			comp++;
		} else {
			return 0;
		}
	}
	return 1;
}

/* Local seconds (since 1970-01-01 of the local calendar) at which rule r falls in
 * year y. */
static int64_t tz_rule_local(const struct tz_rule *r, int64_t y)
{
	int64_t jan1 = period_days_from_civil(y, 1, 1), day;
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	if (r->kind == 'J') {
		day = jan1 + r->day - 1 + (leap && r->day >= 60);
	} else if (r->kind == 'n') {
		day = jan1 + r->day;
	} else {
		static const int mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
		int64_t first = period_days_from_civil(y, r->month, 1);
		int64_t wd = first + 4 - 7 * period_floor_div(first + 4, 7);   /* 0: Sunday */
		int64_t len = mdays[r->month - 1] + (r->month == 2 && leap);

		day = first + (r->day - wd + 7) % 7 + 7 * (r->week - 1);
		while (day >= first + len)
			day -= 7;
	}
	return day * TZ_DAY_S + r->time;
}

/* The footer's offset at utc_s. Its rules are stated in local time: the start in
 * standard time, the end in daylight time. */
static int32_t tz_footer_offset(const struct tz *z, int64_t utc_s)
{
	int64_t y, m, start, end;

	if (!z->dst)
		return z->std_off;
	period_civil_from_days(period_floor_div(utc_s + z->std_off, TZ_DAY_S), &y, &m);
	start = tz_rule_local(&z->start, y) - z->std_off;
	end = tz_rule_local(&z->end, y) - z->dst_off;
	if (start < end)
		return utc_s >= start && utc_s < end ? z->dst_off : z->std_off;
	return utc_s >= end && utc_s < start ? z->std_off : z->dst_off;
}

int32_t tz_offset(const struct tz *z, int64_t utc_s)
{
	size_t lo = 0, hi = z->n;

	if (z->n == 0 || utc_s < z->at[0])
		return z->n == 0 && z->footer ? tz_footer_offset(z, utc_s) : z->first_off;
	/* the last transition at or before utc_s */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (z->at[mid] <= utc_s)
			lo = mid;
		else
			hi = mid;
	}
	return lo == z->n - 1 && z->footer ? tz_footer_offset(z, utc_s) : z->off[lo];
}

/* The first instant (unix seconds) whose local time is at least local_s: the instant
 * of local_s itself, the earlier one where local_s happens twice, the change of
 * offset where it is skipped. Offsets change at most a few times in two days, so the
 * answer lies between local_s minus the offsets a day either side. */
static int64_t tz_first_local(const struct tz *z, int64_t local_s)
{
	int64_t a = local_s - tz_offset(z, local_s - TZ_DAY_S);
	int64_t b = local_s - tz_offset(z, local_s + TZ_DAY_S);
	int64_t lo = a < b ? a : b, hi = a < b ? b : a;

	if (lo + tz_offset(z, lo) >= local_s)
		return lo;
	if (hi + tz_offset(z, hi) < local_s)
		return hi;
	/* skipped: the first instant past the change, local(lo) < local_s <= local(hi) */
	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (mid + tz_offset(z, mid) >= local_s)
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

/* The first instant (ms) of a local period whose first local ms is local_ms. */
static int64_t tz_boundary(const struct tz *z, int64_t local_ms)
{
	return tz_first_local(z, period_floor_div(local_ms, 1000)) * 1000;
}

/* The local period containing ms: from the local time of ms, moved a period back or
 * forward where the offset changed across a boundary (the instant's local date is not
 * its period's, e.g. an hour repeated over midnight). A file whose offsets swing back
 * and forth within hours, which no zone has, may leave no local period around ms: then
 * the UTC one, so that start <= ms < end holds for whatever the file says. */
static void tz_period(const struct tz *z, enum period_kind k, int64_t ms, int64_t *start,
                      int64_t *end)
{
	int64_t off = tz_offset(z, period_floor_div(ms, 1000));
	int64_t local = period_start_ms(k, ms + off * 1000);

	for (int i = 0; i < 4; i++) {
		*start = tz_boundary(z, local);
		*end = tz_boundary(z, period_end_ms(k, local));
		if (*start > ms)
			local = period_start_ms(k, local - 1);
		else if (*end <= ms)
			local = period_end_ms(k, local);
		else
			return;
	}
	*start = period_start_ms(k, ms);
	*end = period_end_ms(k, ms);
}

int64_t tz_period_start_ms(const struct tz *z, enum period_kind k, int64_t ms)
{
	int64_t start, end;

	if (!z || k == PERIOD_TOTAL)
		return period_start_ms(k, ms);
	tz_period(z, k, ms, &start, &end);
	return start;
}

int64_t tz_period_end_ms(const struct tz *z, enum period_kind k, int64_t ms)
{
	int64_t start, end;

	if (!z || k == PERIOD_TOTAL)
		return period_end_ms(k, ms);
	tz_period(z, k, ms, &start, &end);
	return end;
}

/* tz_get's cache: a zone as read from its file, known by the file's identity. */
struct tz_entry {
	struct tz_entry *next;
	struct tz *z;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

static pthread_mutex_t tz_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tz_entry *tz_cache;

/* Reads and parses the file open on fd; NULL with err set. */
static struct tz *tz_read(int fd, const char *name, char *err, size_t errlen)
{
	unsigned char *buf = malloc(TZ_FILE_MAX);
	size_t len = 0;
	ssize_t r = 0;
	struct tz *z = NULL;

	if (!buf) {
		snprintf(err, errlen, "time zone %s: out of memory", name);
		return NULL;
	}
	while (len < TZ_FILE_MAX && (r = read(fd, buf + len, TZ_FILE_MAX - len)) > 0)
		len += (size_t)r;
	if (r < 0)
		snprintf(err, errlen, "time zone %s: %s", name, strerror(errno));
	else if (len == TZ_FILE_MAX || !(z = tz_parse(buf, len)))
		snprintf(err, errlen, "time zone %s: not a TZif file of version 2 or later", name);
	free(buf);
	return z;
}

const struct tz *tz_get(const char *name, char *err, size_t errlen)
{
	const char *dir = getenv("TZDIR");
	struct tz_entry *e;
	struct stat st;
	char path[4096];
	struct tz *z = NULL;
	int fd;

	if (!tz_name_ok(name)) {
		snprintf(err, errlen, "time zone '%.*s': not a zone name (letters, digits, _+-./)",
		         TZ_NAME_MAX, name);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "/usr/share/zoneinfo", name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 ||
	    !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "time zone %s: no such zone (%s)", name, path);
		goto out;
	}
	pthread_mutex_lock(&tz_lock);
	for (e = tz_cache; e; e = e->next)
		if (strcmp(e->z->name, name) == 0 && e->dev == st.st_dev && e->ino == st.st_ino &&
		    e->size == st.st_size && e->mtime.tv_sec == st.st_mtim.tv_sec &&
		    e->mtime.tv_nsec == st.st_mtim.tv_nsec)
			break;
	if (e) {
		z = e->z;
	} else if ((z = tz_read(fd, name, err, errlen))) {
		if (!(e = malloc(sizeof(*e)))) {
			snprintf(err, errlen, "time zone %s: out of memory", name);
			tz_free(z);
			z = NULL;
		} else {
			snprintf(z->name, sizeof(z->name), "%s", name);
			*e = (struct tz_entry){ tz_cache, z, st.st_dev, st.st_ino, st.st_size,
			                        st.st_mtim };
			tz_cache = e;
		}
	}
	pthread_mutex_unlock(&tz_lock);
out:
	if (fd >= 0)
		close(fd);
	return z;
}
