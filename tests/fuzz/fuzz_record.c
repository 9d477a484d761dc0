/* libFuzzer target: the record intake path over arbitrary bytes (peer input): framing
 * of a TCP ring stream, each record parsed and authenticated, its usage read as intake
 * reads it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gwsecret.h"
#include "record.h"
#include "usage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_record_check_usage(const struct usage *u)
{
	const int64_t c[] = { u->prompt_tokens, u->completion_tokens, u->cached_tokens,
	                      u->cache_creation_tokens, u->reasoning_tokens };
	size_t i;

	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		if (c[i] < 0 && c[i] != ACCT_NONE)
			abort();
	if ((unsigned)u->source >= ACCT_USAGE_SOURCE_COUNT || strlen(u->model) >= sizeof(u->model))
		abort();
}

/* Parses one record and checks what a caller relies on. */
static struct gwsecret_mac *fuzz_mac;
static unsigned long authentic;   /* read, so that the check is not optimised away */

static void fuzz_record_one(const char *msg, size_t len)
{
	struct record r;
	struct usage u;
	char name[ACCT_ID_MAX];
	int i;

	if (record_parse(msg, len, &r) < 0)
		return;
	/* A record is named by its unique id, or by its connection's nonce; what vouches for
	 * it lies within the input and is checked without reading past it. */
	if (r.id.len ? r.id.ptr < msg || r.id.ptr + r.id.len > msg + len || r.id.len >= ACCT_ID_MAX
	             : !r.nonce.len)
		abort();
	if ((r.nonce.len && (r.nonce.ptr < msg || r.nonce.ptr + r.nonce.len > msg + len ||
	                     r.nonce.len > RECORD_NONCE_MAX)) ||
	    (r.mac.len && (r.mac.ptr < msg || r.mac.ptr + r.mac.len > msg + len)) ||
	    (r.tmac.len && (r.tmac.ptr < msg || r.tmac.ptr + r.tmac.len > msg + len)))
		abort();
	if (record_authentic(&r, fuzz_mac))
		authentic++;
	record_name(&r, name, sizeof(name));
	if (strlen(name) >= sizeof(name))
		abort();
	if (r.termination.len != 2 || r.status < -1 || r.status > 999 ||
	    (r.stream != 0 && r.stream != 1 && r.stream != ACCT_NONE) ||
	    strlen(r.model) >= sizeof(r.model) || strlen(r.u_model) >= sizeof(r.u_model) ||
	    strlen(r.provider) >= sizeof(r.provider))
		abort();
	for (i = 0; i < RECORD_U_COUNT; i++)
		if (r.u[i] < 0 && r.u[i] != ACCT_NONE)
			abort();
	if (r.has_capture) {
		if (r.summary.ptr < msg || r.summary.ptr + r.summary.len > msg + len ||
		    r.body_bytes < 0)
			abort();
		usage_from_capture(r.summary.ptr, r.summary.len, r.cap_kind == 's', &u);
	} else {
		usage_from_fields(&r, &u);
	}
	fuzz_record_check_usage(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so ASan catches any read past the end. */
	char *buf = malloc(size ? size : 1);
	size_t off = 0;

	if (!buf)
		return 0;
	if (!fuzz_mac) {
		unsigned char key[KEYHASH_SECRET_LEN] = { 1 };
		struct gwsecret s;

		gwsecret_derive(key, &s);
		if (!(fuzz_mac = gwsecret_mac_new(&s)))
			abort();
	}
	memcpy(buf, data, size);
	/* As a datagram: the whole input is one record. */
	fuzz_record_one(buf, size);
	/* As a TCP stream, with a limit small enough to be reached. */
	for (;;) {
		const char *msg;
		size_t msg_len, used;
		int rc = record_frame_next(buf + off, size - off, 4096, &msg, &msg_len, &used);

		if (rc != 1)
			break;
		if (msg < buf + off || msg_len > 4096 || msg + msg_len > buf + size || used == 0 ||
		    used > size - off)
			abort();
		fuzz_record_one(msg, msg_len);
		off += used;
	}
	free(buf);
	return 0;
}
