/* record: parsing HAProxy's per-transaction records (see record.h). Pure; intake thread.
 *
 * Fields are single-space separated and never contain a space, but for the last one
 * (the response capture's summary), which runs to the end of the record. Strings that may hold anything are url-encoded by HAProxy (url_enc). */
#include "record.h"

#include <stdio.h>
#include <string.h>

#include "acct.h"

/* A "tally4" record has as many fields as a "tally5" one; a "tally3" one lacks the
 * classes priced apart and the tier before the capture, a "tally2" one the stored
 * response's id as well. */
#define RECORD_FIELDS_3 (RECORD_F_U_ID + 2)
#define RECORD_FIELDS_2 (RECORD_F_U_CC + 2)
#define RECORD_INT_MAX 9007199254740991LL   /* 2^53 - 1 */

_Static_assert(RECORD_FIELDS == 42, "a new record field needs a new record version");

/* Each field's flags (RECORD_MACD, RECORD_URLENC), from record.h's table. */
static const unsigned char record_field_flags[RECORD_FIELDS] = {
#define RECORD_FIELD_FLAGS(name, printed, var, flags) flags,
	RECORD_FIELD_TABLE(RECORD_FIELD_FLAGS)
#undef RECORD_FIELD_FLAGS
};

/* Where each usage class (enum record_usage_field) is printed. */
static const unsigned char record_usage_at[RECORD_U_COUNT] = {
	RECORD_F_U_PT, RECORD_F_U_CT, RECORD_F_U_CACHED, RECORD_F_U_RT, RECORD_F_U_IT,
	RECORD_F_U_OT, RECORD_F_U_CR, RECORD_F_U_CC, RECORD_F_U_C1H, RECORD_F_U_AI,
	RECORD_F_U_AO, RECORD_F_U_PA, RECORD_F_U_PR, RECORD_F_U_WS,
};

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

/* Decimal integer in [min, RECORD_INT_MAX], optional '-', no '+'. The bound keeps
 * sums and products of fields (started_at_ms, ttfb_ms) far from overflow. */
static int record_int(struct record_str s, int64_t min, int64_t *out)
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
	if (v > (uint64_t)RECORD_INT_MAX)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return *out < min ? -1 : 0;
}

static int record_absent(struct record_str s)
{
	return s.len == 1 && s.ptr[0] == '-';
}

/* An optional integer: "-" is ACCT_NONE. */
static int record_opt_int(struct record_str s, int64_t min, int64_t *out)
{
	if (record_absent(s)) {
		*out = ACCT_NONE;
		return 0;
	}
	return record_int(s, min, out);
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

/* Decodes HAProxy's url_enc (percent-encoding; it encodes '+' and ' ' too) into dst
 * (cap bytes with the NUL); "-" is empty. Control bytes and NULs are refused: these
 * names end up in the database and in logs. */
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

/* "c2 <kind> <body bytes> <summary>": the summary (haproxy/capture.lua) runs to the end
 * of the record and is read by spoa/usage.c. */
static int record_capture(struct record_str s, struct record *r)
{
	struct record_str f[3];
	const char *p = s.ptr, *end = s.ptr + s.len;
	int64_t body;
	int i;

	for (i = 0; i < 3; i++) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));

		if (!sp)
			return -1;
		f[i] = (struct record_str){ p, (size_t)(sp - p) };
		p = sp + 1;
	}
	if (f[0].len != 2 || memcmp(f[0].ptr, "c2", 2) != 0 || f[1].len != 1 ||
	    !memchr("jso", f[1].ptr[0], 3) || record_int(f[2], 0, &body) < 0)
		return -1;
	r->has_capture = 1;
	r->cap_kind = f[1].ptr[0];
	r->body_bytes = body;
	r->summary = (struct record_str){ p, (size_t)(end - p) };
	return 0;
}

/* An optional token of at most max bytes: "-" is empty. */
static int record_opt_token(struct record_str f, size_t max, struct record_str *out)
{
	*out = (struct record_str){ NULL, 0 };
	if (record_absent(f))
		return 0;
	if (!record_token_ok(f, max))
		return -1;
	*out = f;
	return 0;
}

int record_parse(const char *buf, size_t len, struct record *r)
{
	struct record_str f[RECORD_FIELDS];
	const char *p = buf, *end = buf + len;
	int64_t skipped;
	int i, nf;

	memset(r, 0, sizeof(*r));
	if (len && end[-1] == '\n')
		end--;
	/* "tally5": the log-format of haproxy/tally.cfg; "tally4" to "tally2", the ones
	 * before it, still read so that their refusal says what they are. */
	if (len < 7 || memcmp(buf, "tally", 5) != 0 || buf[5] < '2' || buf[5] > '5' ||
	    buf[6] != ' ')
		return -1;
	r->version = buf[5];
	nf = buf[5] >= '4' ? RECORD_FIELDS : buf[5] == '3' ? RECORD_FIELDS_3 : RECORD_FIELDS_2;
	for (i = 0; i < nf - 1; i++) {
		const char *sp = memchr(p, ' ', (size_t)(end - p));

		if (!sp)
			return -1;
		f[i] = (struct record_str){ p, (size_t)(sp - p) };
		p = sp + 1;
	}
	f[nf - 1] = (struct record_str){ p, (size_t)(end - p) };
	memcpy(r->field, f, (size_t)nf * sizeof(f[0]));
	r->nfields = nf;

	if (record_opt_token(f[RECORD_F_MAC], GWSECRET_MAC_LEN, &r->mac) < 0 ||
	    record_opt_token(f[RECORD_F_NONCE], RECORD_NONCE_MAX, &r->nonce) < 0 ||
	    record_opt_token(f[RECORD_F_TERM_MAC], GWSECRET_MAC_LEN, &r->tmac) < 0 ||
	    record_opt_token(f[RECORD_F_ID], ACCT_ID_MAX - 1, &r->id) < 0)
		return -1;
	/* HAProxy has no unique id for a request it could not parse (or one a client
	 * abandoned before sending it): the connection's nonce stands in. */
	if (!r->id.len && !r->nonce.len)
		return -1;
	if (record_int(f[RECORD_F_ACCEPT_S], 0, &r->accept_s) < 0 ||
	    record_int(f[RECORD_F_ACCEPT_MS], 0, &r->accept_ms) < 0 || r->accept_ms > 999 ||
	    record_int(f[RECORD_F_STATUS], -1, &r->status) < 0 || r->status > 999 ||
	    record_int(f[RECORD_F_BYTES_IN], 0, &r->bytes_in) < 0 ||
	    record_int(f[RECORD_F_BYTES_OUT], 0, &r->bytes_out) < 0 ||
	    record_int(f[RECORD_F_TR], -1, &r->tr) < 0 || record_int(f[RECORD_F_TW], -1, &r->tw) < 0 ||
	    record_int(f[RECORD_F_TC], -1, &r->tc) < 0 ||
	    record_int(f[RECORD_F_TR_SERVER], -1, &r->tr_server) < 0 ||
	    record_int(f[RECORD_F_TA], -1, &r->ta) < 0)
		return -1;
	if (f[RECORD_F_TERMINATION].len != 2 || !record_token_ok(f[RECORD_F_TERMINATION], 2) ||
	    !record_token_ok(f[RECORD_F_BACKEND], 255))
		return -1;
	r->termination = f[RECORD_F_TERMINATION];
	r->backend = f[RECORD_F_BACKEND];
	if (!record_absent(f[RECORD_F_VERDICT])) {
		if (!record_token_ok(f[RECORD_F_VERDICT], ACCT_SHORT_MAX - 1))
			return -1;
		r->verdict = f[RECORD_F_VERDICT];
	}
	if (record_opt_int(f[RECORD_F_KEY_ID], 0, &r->key_id) < 0 ||
	    record_urldec(f[RECORD_F_MODEL], r->model, sizeof(r->model)) < 0 ||
	    record_urldec(f[RECORD_F_PROVIDER], r->provider, sizeof(r->provider)) < 0 ||
	    record_opt_int(f[RECORD_F_STREAM], 0, &r->stream) < 0 || r->stream > 1)
		return -1;
	/* HAProxy prints a boolean variable as 1 or 0. */
	if (record_opt_int(f[RECORD_F_SKIPPED], 0, &skipped) < 0 ||
	    record_opt_int(f[RECORD_F_SPOE_ERROR], -RECORD_INT_MAX, &r->spoe_error) < 0)
		return -1;
	r->skipped = skipped == 1;
	/* The upstream's own words (json_query of its response): a name that cannot be
	 * stored or a negative count is not reported, and costs the record nothing else. */
	if (record_urldec(f[RECORD_F_U_MODEL], r->u_model, sizeof(r->u_model)) < 0)
		r->u_model[0] = '\0';
	for (i = 0; i < RECORD_U_COUNT; i++) {
		int at = record_usage_at[i];

		r->u[i] = ACCT_NONE;
		if (at >= nf - 1)
			continue;
		if (record_opt_int(f[at], -RECORD_INT_MAX, &r->u[i]) < 0)
			return -1;
		if (r->u[i] < 0)
			r->u[i] = ACCT_NONE;
	}
	/* The id of the response a Responses create stored (json_query of the answer):
	 * one that is not a plain token is not reported; so with the tier. */
	if (nf >= RECORD_FIELDS_3 &&
	    record_opt_token(f[RECORD_F_U_ID], ACCT_RESPONSE_ID_MAX - 1, &r->u_id) < 0)
		r->u_id = (struct record_str){ NULL, 0 };
	if (nf == RECORD_FIELDS &&
	    (record_opt_token(f[RECORD_F_U_TIER], ACCT_TIER_MAX - 1, &r->u_tier) < 0 ||
	     !tier_name_ok(r->u_tier.ptr, r->u_tier.len)))
		r->u_tier = (struct record_str){ NULL, 0 };
	/* A capture HAProxy cut (a record longer than the log line's len) or one that is
	 * otherwise broken loses its usage, not the transaction. */
	if (!record_absent(f[nf - 1]))
		record_capture(f[nf - 1], r);
	return 0;
}

/* The MAC's message, gathered in a buffer: one OpenSSL call per buffer, not per field. */
struct record_macbuf {
	struct gwsecret_mac *m;
	size_t n;
	int failed;
	unsigned char b[512];
};

static void record_mac_flush(struct record_macbuf *mb)
{
	if (mb->n && gwsecret_mac_add(mb->m, mb->b, mb->n) < 0)
		mb->failed = 1;
	mb->n = 0;
}

static void record_mac_byte(struct record_macbuf *mb, int c)
{
	if (mb->n == sizeof(mb->b))
		record_mac_flush(mb);
	mb->b[mb->n++] = (unsigned char)c;
}

/* Adds the separator and what HAProxy's concat() added for field i: "" for an absent one
 * ("-"), the decoded bytes of an url-encoded one. A decoded value holding the separator
 * fails the MAC: the fields would no longer split one way only (the others are tokens
 * or numbers record_parse checked, or the capture, which comes last). */
static void record_mac_field(const struct record *r, int i, struct record_macbuf *mb)
{
	struct record_str s = r->field[i];
	size_t k;

	record_mac_byte(mb, RECORD_MAC_SEP);
	if (record_absent(s))
		return;
	for (k = 0; k < s.len; k++) {
		int c = (unsigned char)s.ptr[k];

		/* url_enc printed it: the MAC is of the value HAProxy held */
		if (c == '%' && (record_field_flags[i] & RECORD_URLENC)) {
			int hi = k + 2 < s.len ? record_hex(s.ptr[k + 1]) : -1;
			int lo = k + 2 < s.len ? record_hex(s.ptr[k + 2]) : -1;

			if (hi < 0 || lo < 0 || (hi << 4 | lo) == RECORD_MAC_SEP) {
				mb->failed = 1;
				return;
			}
			c = hi << 4 | lo;
			k += 2;
		}
		record_mac_byte(mb, c);
	}
}

/* 1 if mac is the MAC of what mb gathered since its start. */
static int record_mac_end(struct record_macbuf *mb, struct record_str mac)
{
	record_mac_flush(mb);
	return !mb->failed && gwsecret_mac_end(mb->m, mac.ptr, mac.len);
}

/* HAProxy's unique-id-format starts with the accept time (%Ts%ms-): the id the MAC
 * covers then vouches for the record's time. */
static int record_id_dated(const struct record *r)
{
	struct record_str ts = r->field[RECORD_F_ACCEPT_S], ms = r->field[RECORD_F_ACCEPT_MS];

	return r->id.len > ts.len + ms.len && ms.len == 3 &&
	       memcmp(r->id.ptr, ts.ptr, ts.len) == 0 &&
	       memcmp(r->id.ptr + ts.len, ms.ptr, ms.len) == 0 &&
	       r->id.ptr[ts.len + ms.len] == '-';
}

/* 1 if the record's main MAC is right, its status taken as HAProxy's http-after-response
 * saw it (with_status) or as absent, and the termination state's MAC said to come (term)
 * or not. */
static int record_mac_main(const struct record *r, struct gwsecret_mac *m, int with_status,
                           int term)
{
	struct record_macbuf mb = { .m = m };
	int i;

	if (gwsecret_mac_begin(m) < 0)
		return 0;
	/* "tally5t": HAProxy sent the termination state's MAC too, which must then check. */
	memcpy(mb.b, "tally5t", 7);
	mb.n = term ? 7 : 6;
	for (i = 0; i < RECORD_FIELDS; i++) {
		if (!(record_field_flags[i] & RECORD_MACD))
			continue;
		if (i == RECORD_F_STATUS && !with_status)
			record_mac_byte(&mb, RECORD_MAC_SEP);
		else
			record_mac_field(r, i, &mb);
	}
	return record_mac_end(&mb, r->mac);
}

/* A transaction HAProxy answered without http-after-response (a request it could not
 * parse, a client gone before any answer) has no status variable: its printed status is
 * then unauthenticated, and is taken only if not 2xx (every 2xx answer passes
 * http-after-response), where it cannot make a row billable. */
static int record_mac_any_status(const struct record *r, struct gwsecret_mac *m, int term)
{
	return record_mac_main(r, m, 1, term) ||
	       ((r->status < 200 || r->status > 299) && record_mac_main(r, m, 0, term));
}

int record_authentic(const struct record *r, struct gwsecret_mac *m)
{
	struct record_macbuf mb = { .m = m };

	if (r->version != '5' || !r->mac.len || (r->id.len && !record_id_dated(r)))
		return 0;
	/* A record without id (no transaction: HAProxy refused the request before parsing
	 * it) has no termination-state fetch on 3.4 either: its state is unauthenticated,
	 * and such a record bills nothing (join.c). */
	if (!record_mac_any_status(r, m, r->tmac.len != 0) &&
	    (r->tmac.len || r->id.len || !record_mac_any_status(r, m, 1)))
		return 0;
	if (!r->tmac.len)
		return 1;
	if (gwsecret_mac_begin(m) < 0)
		return 0;
	memcpy(mb.b, r->termination.ptr, r->termination.len);
	mb.n = r->termination.len;
	record_mac_field(r, RECORD_F_ID, &mb);
	record_mac_field(r, RECORD_F_NONCE, &mb);
	return record_mac_end(&mb, r->tmac);
}

void record_name(const struct record *r, char *out, size_t cap)
{
	if (r->id.len)
		snprintf(out, cap, "%.*s", (int)r->id.len, r->id.ptr);
	else
		snprintf(out, cap, "haproxy-%.*s", (int)r->nonce.len, r->nonce.ptr);
}
