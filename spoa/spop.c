/* spop: the SPOP 2.0 codec (HAProxy doc/SPOE.txt section 3). Owns the wire format
 * only: varints, frames, typed data, KV lists, NOTIFY messages and the frames the agent
 * writes. Pure and reentrant; the agent's I/O threads call it on their own buffers. */
#include "spop.h"

#include <limits.h>
#include <string.h>

/* Varints follow HAProxy's encode_varint(): values below 240 take one byte; otherwise
 * the first byte carries 240 + the low 4 bits and each following byte adds
 * byte << shift (continuation bit included, which the encoder pre-subtracts). */
int spop_varint_encode(uint64_t v, unsigned char *out, size_t cap)
{
	unsigned char tmp[SPOP_VARINT_MAX_LEN];
	size_t n = 0;

	if (v < 240) {
		tmp[n++] = (unsigned char)v;
	} else {
		tmp[n++] = (unsigned char)(v | 240);
		v = (v - 240) >> 4;
		while (v >= 128) {
			tmp[n++] = (unsigned char)(v | 128);
			v = (v - 128) >> 7;
		}
		tmp[n++] = (unsigned char)v;
	}
	if (n > cap)
		return -1;
	memcpy(out, tmp, n);
	return (int)n;
}

int spop_varint_decode(const unsigned char **p, const unsigned char *end, uint64_t *out)
{
	const unsigned char *q = *p;
	unsigned shift = 4;
	uint64_t v, add;
	size_t n;

	if (q >= end)
		return -1;
	v = *q++;
	if (v >= 240) {
		for (n = 1; ; n++) {
			unsigned char b;

			if (n >= SPOP_VARINT_MAX_LEN || q >= end)
				return -1;
			b = *q++;
			/* bits shifted out, or a sum past UINT64_MAX, mean overflow */
			if ((uint64_t)b >> (64 - shift))
				return -1;
			add = (uint64_t)b << shift;
			if (add > UINT64_MAX - v)
				return -1;
			v += add;
			if (b < 128)
				break;
			shift += 7;
		}
	}
	*out = v;
	*p = q;
	return 0;
}

static uint32_t spop_get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void spop_set_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

int spop_frame_decode(const unsigned char *buf, size_t len, uint32_t max_frame_size,
                      struct spop_frame *f, size_t *consumed, enum spop_status *err)
{
	const unsigned char *p, *end;
	struct spop_frame fr;
	uint32_t flen;

	if (len < 4)
		return 0;
	flen = spop_get_be32(buf);
	if (flen > max_frame_size) {
		*err = SPOP_ERR_TOO_BIG;
		return -1;
	}
	if (flen < SPOP_FRAME_HDR_MIN) {
		*err = SPOP_ERR_INVALID;
		return -1;
	}
	if (len - 4 < flen)
		return 0;

	p = buf + 4;
	end = p + flen;
	fr.type = (enum spop_frame_type)p[0];
	fr.flags = spop_get_be32(p + 1);
	p += 5;
	if (spop_varint_decode(&p, end, &fr.stream_id) < 0 ||
	    spop_varint_decode(&p, end, &fr.frame_id) < 0) {
		*err = SPOP_ERR_INVALID;
		return -1;
	}
	fr.payload = p;
	fr.payload_len = (size_t)(end - p);
	*f = fr;
	*consumed = 4 + (size_t)flen;
	return 1;
}

/* STRING: varint length then that many bytes, all within end. */
static int spop_str_decode(const unsigned char **p, const unsigned char *end, struct spop_str *s)
{
	const unsigned char *q = *p;
	uint64_t len;

	if (spop_varint_decode(&q, end, &len) < 0 || len > (uint64_t)(end - q))
		return -1;
	s->ptr = (const char *)q;
	s->len = (size_t)len;
	*p = q + len;
	return 0;
}

/* Two's complement without relying on implementation-defined conversions. */
static int64_t spop_u64_to_i64(uint64_t v)
{
	if (v <= INT64_MAX)
		return (int64_t)v;
	return -(int64_t)(UINT64_MAX - v) - 1;
}

int spop_data_decode(const unsigned char **p, const unsigned char *end, struct spop_data *out)
{
	const unsigned char *q = *p;
	struct spop_data d;
	unsigned char tb;
	uint64_t v = 0;
	size_t iplen;

	if (q >= end)
		return -1;
	memset(&d, 0, sizeof(d));
	tb = *q++;
	d.type = (enum spop_data_type)(tb & SPOP_DATA_TYPE_MASK);

	switch (d.type) {
	case SPOP_DATA_NULL:
		break;
	case SPOP_DATA_BOOL:
		d.u.b = (tb & SPOP_DATA_FLAG_TRUE) != 0;
		break;
	case SPOP_DATA_INT32:
	case SPOP_DATA_UINT32:
	case SPOP_DATA_INT64:
	case SPOP_DATA_UINT64:
		if (spop_varint_decode(&q, end, &v) < 0)
			return -1;
		if (d.type == SPOP_DATA_INT32) {
			/* HAProxy sign-extends signed values to 64 bits */
			int64_t s = spop_u64_to_i64(v);

			if (s < INT32_MIN || s > INT32_MAX)
				return -1;
			d.u.i32 = (int32_t)s;
		} else if (d.type == SPOP_DATA_UINT32) {
			if (v > UINT32_MAX)
				return -1;
			d.u.u32 = (uint32_t)v;
		} else if (d.type == SPOP_DATA_INT64) {
			d.u.i64 = spop_u64_to_i64(v);
		} else {
			d.u.u64 = v;
		}
		break;
	case SPOP_DATA_IPV4:
	case SPOP_DATA_IPV6:
		iplen = d.type == SPOP_DATA_IPV4 ? 4 : 16;
		if ((size_t)(end - q) < iplen)
			return -1;
		memcpy(d.u.ip, q, iplen);
		q += iplen;
		break;
	case SPOP_DATA_STR:
	case SPOP_DATA_BIN:
		if (spop_str_decode(&q, end, &d.u.str) < 0)
			return -1;
		break;
	default:
		return -1; /* types 10-15 are reserved */
	}
	*out = d;
	*p = q;
	return 0;
}

int spop_kv_next(const unsigned char **p, const unsigned char *end,
                 struct spop_str *key, struct spop_data *val)
{
	const unsigned char *q = *p;

	if (q == end)
		return 0;
	if (q > end || spop_str_decode(&q, end, key) < 0 || spop_data_decode(&q, end, val) < 0)
		return -1;
	*p = q;
	return 1;
}

static int spop_str_eq(const struct spop_str *s, const char *lit)
{
	size_t n = strlen(lit);

	return s->len == n && memcmp(s->ptr, lit, n) == 0;
}

static int spop_is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* Splits the next item off a comma-separated list, trimming spaces around it.
 * Returns 1 with *item set (possibly empty), 0 once the list is consumed. */
static int spop_list_next(struct spop_str *list, struct spop_str *item)
{
	const char *s, *e, *comma;

	if (!list->ptr)
		return 0;
	s = list->ptr;
	comma = memchr(s, ',', list->len);
	e = comma ? comma : s + list->len;
	if (comma) {
		list->len -= (size_t)(comma + 1 - s);
		list->ptr = comma + 1;
	} else {
		list->ptr = NULL;
		list->len = 0;
	}
	while (s < e && spop_is_space(*s))
		s++;
	while (e > s && spop_is_space(e[-1]))
		e--;
	item->ptr = s;
	item->len = (size_t)(e - s);
	return 1;
}

/* "Major.Minor" with major 2: announcing a major version means supporting every
 * minor version below it (SPOE.txt 3.2.4), so any 2.x implies 2.0. */
static int spop_version_is_2x(const struct spop_str *v)
{
	size_t i = 0, minor_start;
	unsigned major = 0;

	while (i < v->len && v->ptr[i] >= '0' && v->ptr[i] <= '9') {
		if (major < 1000)
			major = major * 10 + (unsigned)(v->ptr[i] - '0');
		i++;
	}
	if (i == 0 || i >= v->len || v->ptr[i] != '.')
		return 0;
	minor_start = ++i;
	while (i < v->len && v->ptr[i] >= '0' && v->ptr[i] <= '9')
		i++;
	return i == v->len && i > minor_start && major == 2;
}

static int spop_versions_have_2x(struct spop_str list)
{
	struct spop_str item;

	while (spop_list_next(&list, &item))
		if (spop_version_is_2x(&item))
			return 1;
	return 0;
}

static void spop_caps_parse(struct spop_str list, struct spop_hello *h)
{
	struct spop_str item;

	while (spop_list_next(&list, &item)) {
		if (spop_str_eq(&item, "pipelining"))
			h->pipelining = 1;
		else if (spop_str_eq(&item, "fragmentation"))
			h->fragmentation = 1;
	}
}

/* Any of the four integer types as a non-negative value (HAProxy accepts them all
 * for sizes and codes). -1 for other types and negative values. */
static int spop_data_to_u64(const struct spop_data *d, uint64_t *out)
{
	switch (d->type) {
	case SPOP_DATA_INT32:
		if (d->u.i32 < 0)
			return -1;
		*out = (uint64_t)d->u.i32;
		return 0;
	case SPOP_DATA_UINT32:
		*out = d->u.u32;
		return 0;
	case SPOP_DATA_INT64:
		if (d->u.i64 < 0)
			return -1;
		*out = (uint64_t)d->u.i64;
		return 0;
	case SPOP_DATA_UINT64:
		*out = d->u.u64;
		return 0;
	default:
		return -1;
	}
}

/* Checks the header rules shared by HELLO and DISCONNECT: unfragmented, ids 0. */
static int spop_control_frame_check(const struct spop_frame *f, enum spop_status *err)
{
	if (!(f->flags & SPOP_FLAG_FIN)) {
		*err = SPOP_ERR_FRAG_NOT_SUPPORTED;
		return -1;
	}
	if (f->stream_id != 0 || f->frame_id != 0) {
		*err = SPOP_ERR_INVALID;
		return -1;
	}
	return 0;
}

int spop_hello_parse(const struct spop_frame *f, struct spop_hello *h, enum spop_status *err)
{
	const unsigned char *p = f->payload, *end = f->payload + f->payload_len;
	int have_vsn = 0, vsn_ok = 0, have_mfs = 0, have_cap = 0, r;
	uint64_t mfs = 0;
	struct spop_hello out;
	struct spop_str key;
	struct spop_data val;

	if (f->type != SPOP_FRAME_HAPROXY_HELLO) {
		*err = SPOP_ERR_INVALID;
		return -1;
	}
	if (spop_control_frame_check(f, err) < 0)
		return -1;

	memset(&out, 0, sizeof(out));
	while ((r = spop_kv_next(&p, end, &key, &val)) == 1) {
		if (spop_str_eq(&key, "supported-versions")) {
			if (val.type != SPOP_DATA_STR)
				goto invalid;
			have_vsn = 1;
			vsn_ok = spop_versions_have_2x(val.u.str);
		} else if (spop_str_eq(&key, "max-frame-size")) {
			if (spop_data_to_u64(&val, &mfs) < 0)
				goto invalid;
			have_mfs = 1;
		} else if (spop_str_eq(&key, "capabilities")) {
			if (val.type != SPOP_DATA_STR)
				goto invalid;
			have_cap = 1;
			spop_caps_parse(val.u.str, &out);
		} else if (spop_str_eq(&key, "healthcheck")) {
			if (val.type != SPOP_DATA_BOOL)
				goto invalid;
			out.healthcheck = val.u.b;
		} else if (spop_str_eq(&key, "engine-id")) {
			if (val.type != SPOP_DATA_STR)
				goto invalid;
			out.engine_id = val.u.str;
		}
		/* unknown items are ignored, as SPOE.txt allows */
	}
	if (r < 0)
		goto invalid;

	if (!have_vsn)
		*err = SPOP_ERR_NO_VSN;
	else if (!vsn_ok)
		*err = SPOP_ERR_BAD_VSN;
	else if (!have_mfs)
		*err = SPOP_ERR_NO_FRAME_SIZE;
	else if (mfs < SPOP_MIN_FRAME_SIZE)
		*err = SPOP_ERR_BAD_FRAME_SIZE;
	else if (!have_cap)
		*err = SPOP_ERR_NO_CAP;
	else {
		/* the agent answers with min(its own, this): larger values change nothing */
		out.max_frame_size = mfs > UINT32_MAX ? UINT32_MAX : (uint32_t)mfs;
		*h = out;
		return 0;
	}
	return -1;

invalid:
	*err = SPOP_ERR_INVALID;
	return -1;
}

int spop_disconnect_parse(const struct spop_frame *f, uint32_t *status, struct spop_str *message)
{
	const unsigned char *p = f->payload, *end = f->payload + f->payload_len;
	int have_status = 0, have_msg = 0, r;
	enum spop_status err;
	struct spop_str key, msg = { NULL, 0 };
	struct spop_data val;
	uint64_t code = 0;

	if (f->type != SPOP_FRAME_HAPROXY_DISCONNECT && f->type != SPOP_FRAME_AGENT_DISCONNECT)
		return -1;
	if (spop_control_frame_check(f, &err) < 0)
		return -1;
	while ((r = spop_kv_next(&p, end, &key, &val)) == 1) {
		if (spop_str_eq(&key, "status-code")) {
			if (spop_data_to_u64(&val, &code) < 0 || code > UINT32_MAX)
				return -1;
			have_status = 1;
		} else if (spop_str_eq(&key, "message")) {
			if (val.type != SPOP_DATA_STR)
				return -1;
			msg = val.u.str;
			have_msg = 1;
		}
	}
	if (r < 0 || !have_status || !have_msg)
		return -1;
	*status = (uint32_t)code;
	*message = msg;
	return 0;
}

int spop_msg_next(const unsigned char **p, const unsigned char *end, struct spop_msg *m)
{
	const unsigned char *q = *p, *args;
	struct spop_str name, key;
	struct spop_data val;
	unsigned nargs, i;

	if (q == end)
		return 0;
	if (q > end || spop_str_decode(&q, end, &name) < 0 || q >= end)
		return -1;
	nargs = *q++;
	args = q;
	for (i = 0; i < nargs; i++)
		if (spop_kv_next(&q, end, &key, &val) != 1)
			return -1;
	m->name = name;
	m->nargs = nargs;
	m->args = args;
	m->args_end = q;
	*p = q;
	return 1;
}

void spop_writer_init(struct spop_writer *w, unsigned char *buf, size_t cap)
{
	w->buf = buf;
	w->cap = cap;
	w->len = 0;
	w->frame_start = 0;
	w->overflow = 0;
}

static void spop_put_bytes(struct spop_writer *w, const void *src, size_t n)
{
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = 1;
		return;
	}
	if (n)
		memcpy(w->buf + w->len, src, n);
	w->len += n;
}

static void spop_put_byte(struct spop_writer *w, unsigned char b)
{
	spop_put_bytes(w, &b, 1);
}

static void spop_put_varint(struct spop_writer *w, uint64_t v)
{
	unsigned char tmp[SPOP_VARINT_MAX_LEN];

	spop_put_bytes(w, tmp, (size_t)spop_varint_encode(v, tmp, sizeof(tmp)));
}

static void spop_put_str(struct spop_writer *w, const char *s, size_t len)
{
	spop_put_varint(w, len);
	spop_put_bytes(w, s, len);
}

static void spop_put_data(struct spop_writer *w, const struct spop_data *d)
{
	switch (d->type) {
	case SPOP_DATA_NULL:
		spop_put_byte(w, SPOP_DATA_NULL);
		break;
	case SPOP_DATA_BOOL:
		spop_put_byte(w, SPOP_DATA_BOOL | (d->u.b ? SPOP_DATA_FLAG_TRUE : 0));
		break;
	case SPOP_DATA_INT32:
		spop_put_byte(w, SPOP_DATA_INT32);
		spop_put_varint(w, (uint64_t)(int64_t)d->u.i32);
		break;
	case SPOP_DATA_UINT32:
		spop_put_byte(w, SPOP_DATA_UINT32);
		spop_put_varint(w, d->u.u32);
		break;
	case SPOP_DATA_INT64:
		spop_put_byte(w, SPOP_DATA_INT64);
		spop_put_varint(w, (uint64_t)d->u.i64);
		break;
	case SPOP_DATA_UINT64:
		spop_put_byte(w, SPOP_DATA_UINT64);
		spop_put_varint(w, d->u.u64);
		break;
	case SPOP_DATA_IPV4:
	case SPOP_DATA_IPV6:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_bytes(w, d->u.ip, d->type == SPOP_DATA_IPV4 ? 4 : 16);
		break;
	case SPOP_DATA_STR:
	case SPOP_DATA_BIN:
		spop_put_byte(w, (unsigned char)d->type);
		spop_put_str(w, d->u.str.ptr, d->u.str.len);
		break;
	default:
		w->overflow = 1;
		break;
	}
}

void spop_frame_begin(struct spop_writer *w, enum spop_frame_type t, uint32_t flags,
                      uint64_t stream_id, uint64_t frame_id)
{
	unsigned char hdr[9] = { 0 };

	w->frame_start = w->len;
	hdr[4] = (unsigned char)t;
	spop_set_be32(hdr + 5, flags);
	spop_put_bytes(w, hdr, sizeof(hdr));
	spop_put_varint(w, stream_id);
	spop_put_varint(w, frame_id);
}

void spop_put_kv_str(struct spop_writer *w, const char *key, const char *s, size_t len)
{
	struct spop_data d = { .type = SPOP_DATA_STR, .u.str = { s, len } };

	spop_put_str(w, key, strlen(key));
	spop_put_data(w, &d);
}

void spop_put_kv_uint32(struct spop_writer *w, const char *key, uint32_t v)
{
	struct spop_data d = { .type = SPOP_DATA_UINT32, .u.u32 = v };

	spop_put_str(w, key, strlen(key));
	spop_put_data(w, &d);
}

void spop_put_kv_bool(struct spop_writer *w, const char *key, int v)
{
	struct spop_data d = { .type = SPOP_DATA_BOOL, .u.b = v };

	spop_put_str(w, key, strlen(key));
	spop_put_data(w, &d);
}

void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
                      size_t name_len, const struct spop_data *v)
{
	unsigned char hdr[3] = { SPOP_ACT_SET_VAR, 3, (unsigned char)scope };

	spop_put_bytes(w, hdr, sizeof(hdr));
	spop_put_str(w, name, name_len);
	spop_put_data(w, v);
}

void spop_put_unset_var(struct spop_writer *w, enum spop_scope scope, const char *name,
                        size_t name_len)
{
	unsigned char hdr[3] = { SPOP_ACT_UNSET_VAR, 2, (unsigned char)scope };

	spop_put_bytes(w, hdr, sizeof(hdr));
	spop_put_str(w, name, name_len);
}

int spop_frame_end(struct spop_writer *w)
{
	size_t size = w->len - w->frame_start;

	if (w->overflow || size < 4 || size > INT_MAX) {
		w->len = w->frame_start;
		w->overflow = 0;
		return -1;
	}
	spop_set_be32(w->buf + w->frame_start, (uint32_t)(size - 4));
	return (int)size;
}

int spop_agent_hello_encode(struct spop_writer *w, uint32_t max_frame_size,
                            const char *capabilities)
{
	const char *caps = capabilities ? capabilities : "";

	spop_frame_begin(w, SPOP_FRAME_AGENT_HELLO, SPOP_FLAG_FIN, 0, 0);
	spop_put_kv_str(w, "version", "2.0", 3);
	spop_put_kv_uint32(w, "max-frame-size", max_frame_size);
	spop_put_kv_str(w, "capabilities", caps, strlen(caps));
	return spop_frame_end(w);
}

int spop_agent_disconnect_encode(struct spop_writer *w, enum spop_status status,
                                 const char *message)
{
	const char *msg = message ? message : spop_status_str(status);

	spop_frame_begin(w, SPOP_FRAME_AGENT_DISCONNECT, SPOP_FLAG_FIN, 0, 0);
	spop_put_kv_uint32(w, "status-code", (uint32_t)status);
	spop_put_kv_str(w, "message", msg, strnlen(msg, SPOP_DISCONNECT_MSG_MAX));
	return spop_frame_end(w);
}

const char *spop_status_str(enum spop_status status)
{
	switch (status) {
	case SPOP_ERR_NONE:               return "normal";
	case SPOP_ERR_IO:                 return "I/O error";
	case SPOP_ERR_TOUT:               return "a timeout occurred";
	case SPOP_ERR_TOO_BIG:            return "frame is too big";
	case SPOP_ERR_INVALID:            return "invalid frame received";
	case SPOP_ERR_NO_VSN:             return "version value not found";
	case SPOP_ERR_NO_FRAME_SIZE:      return "max-frame-size value not found";
	case SPOP_ERR_NO_CAP:             return "capabilities value not found";
	case SPOP_ERR_BAD_VSN:            return "unsupported version";
	case SPOP_ERR_BAD_FRAME_SIZE:     return "max-frame-size too big or too small";
	case SPOP_ERR_FRAG_NOT_SUPPORTED: return "fragmentation not supported";
	case SPOP_ERR_INTERLACED_FRAMES:  return "invalid interlaced frames";
	case SPOP_ERR_FRAMEID_NOTFOUND:   return "frame-id not found";
	case SPOP_ERR_RES:                return "resource allocation error";
	case SPOP_ERR_UNKNOWN:            break;
	}
	return "an unknown error occurred";
}
