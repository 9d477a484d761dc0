/* libFuzzer target for the SPOP codec (spoa/spop.c). The input is what an agent reads
 * from a connection: frames back to back. Each frame goes through the parser of its
 * type and through the generic KV reader; every value decoded is re-encoded with the
 * writer and must decode back equal. The writer is also driven into overflow against
 * a canary. Codec bugs show as sanitizer reports or as abort() on a broken property.
 * Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop.h"
#include "../unit/spop_eq.h"

#define FUZZ_MAX_FRAME 16380
#define FUZZ_CANARY    0xa5

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_assert(int cond)
{
	if (!cond)
		abort();
}

/* Writes name=v as a set-var in an ACK and reads it back: an action's tail (name,
 * value) has the layout of a KV pair. */
static void fuzz_round_trip(struct spop_str name, const struct spop_data *v)
{
	static unsigned char buf[FUZZ_MAX_FRAME + 64];
	const unsigned char *p, *end;
	struct spop_writer w;
	struct spop_frame f;
	struct spop_str k;
	struct spop_data d;
	enum spop_status err;
	size_t consumed;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, UINT64_MAX, 1);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, name.ptr, name.len, v);
	n = spop_frame_end(&w);
	fuzz_assert(n > 0 && (size_t)n == w.len);
	fuzz_assert(spop_frame_decode(buf, (size_t)n, UINT32_MAX, &f, &consumed, &err) == 1);
	fuzz_assert(consumed == (size_t)n && f.type == SPOP_FRAME_ACK);
	fuzz_assert(f.stream_id == UINT64_MAX && f.frame_id == 1);
	p = f.payload;
	end = f.payload + f.payload_len;
	fuzz_assert(end - p >= 3 && p[0] == SPOP_ACT_SET_VAR && p[1] == 3 && p[2] == SPOP_SCOPE_TXN);
	p += 3;
	fuzz_assert(spop_kv_next(&p, end, &k, &d) == 1 && p == end);
	fuzz_assert(spop_str_eq(k, name) && spop_data_eq(&d, v));
}

/* Reads [p, end) as a KV-LIST; returns the number of pairs read before it ended or
 * turned out malformed. */
static unsigned fuzz_kv_list(const unsigned char *p, const unsigned char *end)
{
	struct spop_str k;
	struct spop_data d;
	unsigned n = 0;

	while (spop_kv_next(&p, end, &k, &d) == 1) {
		fuzz_assert(p <= end);
		fuzz_round_trip(k, &d);
		n++;
	}
	return n;
}

static void fuzz_notify(const struct spop_frame *f)
{
	const unsigned char *p = f->payload, *end = f->payload + f->payload_len;
	struct spop_msg m;

	while (spop_msg_next(&p, end, &m) == 1) {
		fuzz_assert(m.args <= m.args_end && m.args_end == p && p <= end);
		fuzz_assert(fuzz_kv_list(m.args, m.args_end) == m.nargs);
	}
}

static void fuzz_hello(const struct spop_frame *f)
{
	unsigned char buf[128];
	struct spop_writer w;
	struct spop_hello h;
	enum spop_status err = SPOP_ERR_NONE;
	uint32_t mfs;

	if (spop_hello_parse(f, &h, &err) < 0) {
		fuzz_assert(err != SPOP_ERR_NONE);
		return;
	}
	fuzz_assert(h.max_frame_size >= SPOP_MIN_FRAME_SIZE);
	fuzz_assert(h.engine_id.len <= f->payload_len);
	mfs = h.max_frame_size < FUZZ_MAX_FRAME ? h.max_frame_size : FUZZ_MAX_FRAME;
	spop_writer_init(&w, buf, sizeof(buf));
	fuzz_assert(spop_agent_hello_encode(&w, mfs, h.pipelining ? "pipelining" : "") > 0);
}

static void fuzz_disconnect(const struct spop_frame *f)
{
	struct spop_str msg;
	uint32_t status;

	if (spop_disconnect_parse(f, &status, &msg) == 0)
		fuzz_assert(msg.ptr >= (const char *)f->payload &&
		            msg.ptr + msg.len <= (const char *)f->payload + f->payload_len);
}

/* Encodes an AGENT-DISCONNECT into a writer whose cap comes from the input; bytes past
 * cap must stay untouched whatever happens. */
static void fuzz_writer_cap(const uint8_t *data, size_t size)
{
	unsigned char buf[160];
	char msg[64];
	struct spop_writer w;
	size_t cap, mlen, i;
	int n;

	if (size < 2)
		return;
	cap = data[0] % 128;
	mlen = size - 1 < sizeof(msg) - 1 ? size - 1 : sizeof(msg) - 1;
	for (i = 0; i < mlen; i++)
		msg[i] = data[1 + i] ? (char)data[1 + i] : 'x';
	msg[mlen] = '\0';
	memset(buf, FUZZ_CANARY, sizeof(buf));
	spop_writer_init(&w, buf, cap);
	/* odd: let the encoder pick the status text */
	n = spop_agent_disconnect_encode(&w, (enum spop_status)data[1], data[1] & 1 ? NULL : msg);
	fuzz_assert(n == -1 ? w.len == 0 : (size_t)n == w.len && w.len <= cap);
	for (i = cap; i < sizeof(buf); i++)
		fuzz_assert(buf[i] == FUZZ_CANARY);
}

static void fuzz_varint(const uint8_t *data, size_t size)
{
	unsigned char buf[SPOP_VARINT_MAX_LEN];
	const unsigned char *p = buf;
	uint64_t v = 0, out;
	size_t i;
	int n;

	for (i = 0; i < size && i < 8; i++)
		v = v << 8 | data[i];
	n = spop_varint_encode(v, buf, sizeof(buf));
	fuzz_assert(n > 0 && n <= SPOP_VARINT_MAX_LEN);
	fuzz_assert(spop_varint_decode(&p, buf + n, &out) == 0 && out == v && p == buf + n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0, consumed;
	struct spop_frame f;
	enum spop_status err;
	int r;

	fuzz_varint(data, size);
	fuzz_writer_cap(data, size);

	while (off < size) {
		err = SPOP_ERR_NONE;
		r = spop_frame_decode(data + off, size - off, FUZZ_MAX_FRAME, &f, &consumed, &err);
		if (r < 0)
			fuzz_assert(err == SPOP_ERR_TOO_BIG || err == SPOP_ERR_INVALID);
		if (r <= 0)
			break;
		fuzz_assert(consumed >= 4 + SPOP_FRAME_HDR_MIN && consumed <= size - off);
		fuzz_assert(f.payload + f.payload_len == data + off + consumed);
		switch (f.type) {
		case SPOP_FRAME_HAPROXY_HELLO:
			fuzz_hello(&f);
			break;
		case SPOP_FRAME_HAPROXY_DISCONNECT:
		case SPOP_FRAME_AGENT_DISCONNECT:
			fuzz_disconnect(&f);
			break;
		case SPOP_FRAME_NOTIFY:
			fuzz_notify(&f);
			break;
		default:
			break;
		}
		fuzz_kv_list(f.payload, f.payload + f.payload_len);
		off += consumed;
	}
	return 0;
}
