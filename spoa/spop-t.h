/* SPOP 2.0 codec types: frame, data and status constants from HAProxy's doc/SPOE.txt
 * section 3, plus the borrowed views the codec hands out. Pure data, no thread of its
 * own: the codec (spop.c) is called from the agent's I/O threads. */
#ifndef TALLY_SPOP_T_H
#define TALLY_SPOP_T_H

#include <stddef.h>
#include <stdint.h>

/* A uint64 needs at most 10 bytes in SPOP's varint encoding. */
#define SPOP_VARINT_MAX_LEN  10

/* SPOE.txt 3.2: both peers must accept frames of at least 256 bytes. */
#define SPOP_MIN_FRAME_SIZE  256

/* TYPE(1) FLAGS(4) STREAM-ID(>=1) FRAME-ID(>=1): the smallest possible frame. */
#define SPOP_FRAME_HDR_MIN   7

/* Frame flags (4 bytes, network order). */
#define SPOP_FLAG_FIN        0x1
#define SPOP_FLAG_ABORT      0x2

/* Typed data byte: type in the low nibble, flags in the high one. */
#define SPOP_DATA_TYPE_MASK  0x0f
#define SPOP_DATA_FLAG_TRUE  0x10

/* HAProxy refuses an AGENT-DISCONNECT whose message is longer than this. */
#define SPOP_DISCONNECT_MSG_MAX 255

enum spop_frame_type {
	SPOP_FRAME_UNSET              = 0,
	SPOP_FRAME_HAPROXY_HELLO      = 1,
	SPOP_FRAME_HAPROXY_DISCONNECT = 2,
	SPOP_FRAME_NOTIFY             = 3,
	SPOP_FRAME_AGENT_HELLO        = 101,
	SPOP_FRAME_AGENT_DISCONNECT   = 102,
	SPOP_FRAME_ACK                = 103,
};

/* SPOE.txt 3.5 status codes, carried in DISCONNECT frames. */
enum spop_status {
	SPOP_ERR_NONE               = 0,
	SPOP_ERR_IO                 = 1,
	SPOP_ERR_TOUT               = 2,
	SPOP_ERR_TOO_BIG            = 3,
	SPOP_ERR_INVALID            = 4,
	SPOP_ERR_NO_VSN             = 5,
	SPOP_ERR_NO_FRAME_SIZE      = 6,
	SPOP_ERR_NO_CAP             = 7,
	SPOP_ERR_BAD_VSN            = 8,
	SPOP_ERR_BAD_FRAME_SIZE     = 9,
	SPOP_ERR_FRAG_NOT_SUPPORTED = 10,
	SPOP_ERR_INTERLACED_FRAMES  = 11,
	SPOP_ERR_FRAMEID_NOTFOUND   = 12,
	SPOP_ERR_RES                = 13,
	SPOP_ERR_UNKNOWN            = 99,
};

enum spop_data_type {
	SPOP_DATA_NULL   = 0,
	SPOP_DATA_BOOL   = 1,
	SPOP_DATA_INT32  = 2,
	SPOP_DATA_UINT32 = 3,
	SPOP_DATA_INT64  = 4,
	SPOP_DATA_UINT64 = 5,
	SPOP_DATA_IPV4   = 6,
	SPOP_DATA_IPV6   = 7,
	SPOP_DATA_STR    = 8,
	SPOP_DATA_BIN    = 9,
};

/* Variable scopes of set-var / unset-var actions. */
enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN  = 2,
	SPOP_SCOPE_REQ  = 3,
	SPOP_SCOPE_RES  = 4,
};

enum spop_action {
	SPOP_ACT_SET_VAR   = 1,
	SPOP_ACT_UNSET_VAR = 2,
};

/* A view into a buffer owned by someone else; not NUL-terminated. */
struct spop_str {
	const char *ptr;
	size_t len;
};

struct spop_data {
	enum spop_data_type type;
	union {
		int b;
		int32_t i32;
		uint32_t u32;
		int64_t i64;
		uint64_t u64;
		unsigned char ip[16];   /* IPV4 uses the first 4 bytes, network order */
		struct spop_str str;    /* STR and BIN */
	} u;
};

/* One decoded frame; payload points into the caller's receive buffer. */
struct spop_frame {
	enum spop_frame_type type;
	uint32_t flags;
	uint64_t stream_id, frame_id;
	const unsigned char *payload;
	size_t payload_len;
};

/* What a HAPROXY-HELLO announced. */
struct spop_hello {
	uint32_t max_frame_size;
	int healthcheck;
	int pipelining;
	int fragmentation;
	struct spop_str engine_id;  /* len 0 when absent */
};

/* One NOTIFY message; args..args_end holds nargs KV pairs for spop_kv_next(). */
struct spop_msg {
	struct spop_str name;
	unsigned nargs;
	const unsigned char *args, *args_end;
};

/* Frame writer over a caller-owned buffer. overflow is set instead of writing past
 * cap; spop_frame_end() then drops the unfinished frame. */
struct spop_writer {
	unsigned char *buf;
	size_t cap;
	size_t len;
	size_t frame_start;
	int overflow;
};

#endif
