/* record: parsing HAProxy's per-transaction records (see record.h). Pure; intake thread.
 *
 * Fields are single-space separated and never contain a space, but for the last one
 * (the response capture), which runs to the end of the record and carries its own
 * lengths. Strings that may hold anything are url-encoded by HAProxy (url_enc). */
#include "record.h"

#include <string.h>

#define RECORD_FIELDS 31

static int record_digit(char c)
{
	return c >= '0' && c <= '9';
}

int record_frame_next(const char *buf, size_t len, size_t max_len,
                      const char **msg, size_t *msg_len, size_t *consumed)
{
	size_t i, n = 0;

	if (len == 0)
		return 0;
	if (record_digit(buf[0])) {
		for (i = 0; i < len && record_digit(buf[i]); i++) {
			if (i >= 9 || (i == 1 && buf[0] == '0'))
				return -1;
			n = n * 10 + (size_t)(buf[i] - '0');
		}
		if (i == len)
			return 0;
		if (buf[i] != ' ' || n > max_len || n == 0)
			return -1;
		if (len - i - 1 < n)
			return 0;
		*msg = buf + i + 1;
		*msg_len = n;
		*consumed = i + 1 + n;
		return 1;
	}
	for (i = 0; i < len && i <= max_len; i++) {
		if (buf[i] == '\n') {
			*msg = buf;
			*msg_len = i;
			*consumed = i + 1;
			return 1;
		}
	}
	return i > max_len ? -1 : 0;
}

/* Decimal integer, optional '-', no '+', no overflow. */
static int record_int(struct record_str s, int64_t *out)
{
	size_t i = 0;
	int neg = 0;
	uint64_t v = 0;

	if (s.len && s.ptr[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == s.len || s.len - i > 19)
		return -1;
	for (; i < s.len; i++) {
		if (!record_digit(s.ptr[i]))
			return -1;
		v = v * 10 + (uint64_t)(s.ptr[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static int record_absent(struct record_str s)
{
	return s.len == 1 && s.ptr[0] == '-';
}

/* An optional integer: "-" is ACCT_NONE. */
static int record_opt_int(struct record_str s, int64_t *out)
{
	if (record_absent(s)) {
		*out = ACCT_NONE;
		return 0;
	}
	return record_int(s, out);
}

static int record_hex(char c)
{
	if (record_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes HAProxy's url_enc into dst (cap bytes with the NUL); "-" is empty. Control
 * bytes and NULs are refused: these names end up in the database and in logs. */
static int record_urldec(struct record_str s, char *dst, size_t cap)
{
	size_t i, o = 0;

	dst[0] = '\0';
	if (record_absent(s))
		return 0;
	for (i = 0; i < s.len; i++) {
		int c = (unsigned char)s.ptr[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= s.len)
				return -1;
			hi = record_hex(s.ptr[i + 1]);
			lo = record_hex(s.ptr[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			c = hi << 4 | lo;
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (c < 0x20 || c == 0x7f || o + 1 >= cap)
			return -1;
		dst[o++] = (char)c;
	}
	dst[o] = '\0';
	return 0;
}

static int record_token_ok(struct record_str s, size_t max)
{
	size_t i;

	if (s.len == 0 || s.len > max)
		return 0;
	for (i = 0; i < s.len; i++)
		if ((unsigned char)s.ptr[i] <= 0x20 || (unsigned char)s.ptr[i] >= 0x7f)
			return 0;
	return 1;
}

/* "c1 <kind> <body bytes> <head len> <tail len> <head><tail>" */
static int record_capture(struct record_str s, struct record *r)
{
	struct record_str f[5];
	const char *p = s.ptr, *end = s.ptr + s.len;
	int64_t hlen, tlen;
	int i;

	for (i = 0; i < 5; i++) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));

		if (!sp)
			return -1;
		f[i] = (struct record_str){ p, (size_t)(sp - p) };
		p = sp + 1;
	}
	if (f[0].len != 2 || memcmp(f[0].ptr, "c1", 2) != 0 || f[1].len != 1 ||
	    !strchr("jso", f[1].ptr[0]) || record_int(f[2], &r->body_bytes) < 0 ||
	    record_int(f[3], &hlen) < 0 || record_int(f[4], &tlen) < 0 ||
	    r->body_bytes < 0 || hlen < 0 || tlen < 0 ||
	    (uint64_t)hlen + (uint64_t)tlen != (uint64_t)(end - p))
		return -1;
	r->has_capture = 1;
	r->cap_kind = f[1].ptr[0];
	r->head = (struct record_str){ p, (size_t)hlen };
	r->tail = (struct record_str){ p + hlen, (size_t)tlen };
	return 0;
}

int record_parse(const char *buf, size_t len, struct record *r)
{
	struct record_str f[RECORD_FIELDS];
	const char *p = buf, *end = buf + len;
	int64_t skipped;
	int i;

	memset(r, 0, sizeof(*r));
	if (len && end[-1] == '\n')
		end--;
	for (i = 0; i < RECORD_FIELDS - 1; i++) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));

		if (!sp)
			return -1;
		f[i] = (struct record_str){ p, (size_t)(sp - p) };
		p = sp + 1;
	}
	f[RECORD_FIELDS - 1] = (struct record_str){ p, (size_t)(end - p) };

	if (f[0].len != 6 || memcmp(f[0].ptr, "tally1", 6) != 0 ||
	    !record_token_ok(f[1], ACCT_ID_MAX - 1) || record_absent(f[1]))
		return -1;
	r->id = f[1];
	if (record_int(f[2], &r->accept_s) < 0 || record_int(f[3], &r->accept_ms) < 0 ||
	    r->accept_s < 0 || r->accept_ms < 0 || r->accept_ms > 999 ||
	    record_int(f[4], &r->status) < 0 || record_int(f[5], &r->bytes_in) < 0 ||
	    record_int(f[6], &r->bytes_out) < 0 || record_int(f[7], &r->tr) < 0 ||
	    record_int(f[8], &r->tw) < 0 || record_int(f[9], &r->tc) < 0 ||
	    record_int(f[10], &r->tr_server) < 0 || record_int(f[11], &r->ta) < 0)
		return -1;
	if (f[12].len != 2 || !record_token_ok(f[12], 2) || !record_token_ok(f[13], 255))
		return -1;
	r->termination = f[12];
	r->backend = f[13];
	if (!record_absent(f[14])) {
		if (!record_token_ok(f[14], ACCT_SHORT_MAX - 1))
			return -1;
		r->verdict = f[14];
	}
	if (record_opt_int(f[15], &r->key_id) < 0 ||
	    record_urldec(f[16], r->model, sizeof(r->model)) < 0 ||
	    record_urldec(f[17], r->provider, sizeof(r->provider)) < 0 ||
	    record_opt_int(f[18], &r->stream) < 0 ||
	    (r->stream != ACCT_NONE && r->stream != 0 && r->stream != 1))
		return -1;
	/* HAProxy prints a boolean variable as 1 or 0. */
	if (record_opt_int(f[19], &skipped) < 0)
		return -1;
	r->skipped = skipped == 1;
	if (record_opt_int(f[20], &r->spoe_error) < 0 ||
	    record_urldec(f[21], r->u_model, sizeof(r->u_model)) < 0)
		return -1;
	for (i = 0; i < RECORD_U_COUNT; i++)
		if (record_opt_int(f[22 + i], &r->u[i]) < 0 || (r->u[i] < 0 && r->u[i] != ACCT_NONE))
			return -1;
	if (record_absent(f[30]))
		return 0;
	return record_capture(f[30], r);
}
