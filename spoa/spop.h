/* SPOP 2.0 codec (HAProxy doc/SPOE.txt section 3): pure functions over (pointer, end)
 * that decode what HAProxy sends and encode what the agent answers. No allocation, no
 * I/O, no global state: called from the agent's I/O threads, each on its own buffers.
 *
 * Decoders never read outside [buf, end) and hand out views (struct spop_str, frame
 * payloads, message args) that borrow the caller's buffer: they stay valid as long as
 * that buffer is neither freed nor overwritten. On failure, a decoder leaves its
 * cursor (*p) where it was. */
#ifndef TALLY_SPOP_H
#define TALLY_SPOP_H

#include "spop-t.h"

/* Encodes v into out. Returns the number of bytes written (1..10), or -1 without
 * writing anything if cap is too small. */
int spop_varint_encode(uint64_t v, unsigned char *out, size_t cap);

/* Decodes one varint from [*p, end) into *out and advances *p. Returns 0, or -1 if
 * truncated, longer than SPOP_VARINT_MAX_LEN bytes, or not fitting in a uint64. */
int spop_varint_decode(const unsigned char **p, const unsigned char *end, uint64_t *out);

/* Decodes the frame at the start of buf[0..len). The 4-byte length is checked against
 * max_frame_size as soon as it is there. Returns:
 *   1  a whole frame: *f filled (f->payload borrows buf), *consumed = 4 + length;
 *   0  more bytes are needed (f, consumed, err untouched);
 *  -1  error, *err = SPOP_ERR_TOO_BIG (length above max_frame_size) or
 *      SPOP_ERR_INVALID (length below the header size, or a bad id varint).
 * Unknown frame types are decoded too: skipping them is the caller's choice. */
int spop_frame_decode(const unsigned char *buf, size_t len, uint32_t max_frame_size,
                      struct spop_frame *f, size_t *consumed, enum spop_status *err);

/* Decodes one TYPED-DATA from [*p, end). STR/BIN views borrow the buffer. INT32 and
 * UINT32 values outside their range, and reserved types 10-15, are rejected.
 * Returns 0 (advancing *p) or -1. */
int spop_data_decode(const unsigned char **p, const unsigned char *end, struct spop_data *out);

/* Reads the next KV pair (STRING name, TYPED-DATA value) of a KV-LIST. Returns 1 with
 * *key and *val filled (borrowing the buffer), 0 at end, -1 if malformed. Empty names
 * are allowed: HAProxy sends them for unnamed message arguments. */
int spop_kv_next(const unsigned char **p, const unsigned char *end,
                 struct spop_str *key, struct spop_data *val);

/* Validates a HAPROXY-HELLO frame (type, FIN set, ids 0) and fills *h (engine_id
 * borrows the frame's buffer). "supported-versions" must hold a 2.x entry,
 * "max-frame-size" must be >= 256, "capabilities" must be present (it is an empty
 * string in health-check HELLOs). Returns 0, or -1 with *err set to the status to
 * send back in an AGENT-DISCONNECT (NO_VSN, BAD_VSN, NO_FRAME_SIZE, BAD_FRAME_SIZE,
 * NO_CAP, FRAG_NOT_SUPPORTED or INVALID). */
int spop_hello_parse(const struct spop_frame *f, struct spop_hello *h, enum spop_status *err);

/* Parses a HAPROXY-DISCONNECT (or AGENT-DISCONNECT) frame: "status-code" and
 * "message" are both required. *message borrows the frame's buffer. Returns 0 or -1. */
int spop_disconnect_parse(const struct spop_frame *f, uint32_t *status, struct spop_str *message);

/* Iterates the LIST-OF-MESSAGES of a NOTIFY payload. Returns 1 with *m filled (its
 * args are validated, so spop_kv_next() over [m->args, m->args_end) yields exactly
 * m->nargs pairs), 0 at end, -1 if malformed. Views borrow the buffer. */
int spop_msg_next(const unsigned char **p, const unsigned char *end, struct spop_msg *m);

/* Writer. Nothing is ever written past cap: a write that does not fit sets
 * w->overflow, later writes are ignored, and spop_frame_end() drops the unfinished
 * frame (w->len goes back to its start, frames ended before it stay) and returns -1.
 * Several frames may be written back to back. The caller keeps each frame within the
 * negotiated max-frame-size (plus 4) by sizing cap or checking spop_frame_end(). */
void spop_writer_init(struct spop_writer *w, unsigned char *buf, size_t cap);

/* Starts a frame: reserves the length, writes type, flags and ids. */
void spop_frame_begin(struct spop_writer *w, enum spop_frame_type t, uint32_t flags,
                      uint64_t stream_id, uint64_t frame_id);

/* KV items for HELLO/DISCONNECT payloads; key is a NUL-terminated constant. */
void spop_put_kv_str(struct spop_writer *w, const char *key, const char *s, size_t len);
void spop_put_kv_uint32(struct spop_writer *w, const char *key, uint32_t v);
void spop_put_kv_bool(struct spop_writer *w, const char *key, int v);

/* ACK actions. A value of an unknown type marks the frame as failed (overflow). */
void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
                      size_t name_len, const struct spop_data *v);
void spop_put_unset_var(struct spop_writer *w, enum spop_scope scope, const char *name,
                        size_t name_len);

/* Finishes the current frame by patching its length. Returns the frame's size
 * including the 4-byte length field, or -1 if it did not fit (frame dropped). */
int spop_frame_end(struct spop_writer *w);

/* Writes a whole AGENT-HELLO ("version" "2.0", "max-frame-size", "capabilities";
 * capabilities NULL means none). Returns like spop_frame_end(). */
int spop_agent_hello_encode(struct spop_writer *w, uint32_t max_frame_size,
                            const char *capabilities);

/* Writes a whole AGENT-DISCONNECT. message NULL means spop_status_str(status); it is
 * cut to SPOP_DISCONNECT_MSG_MAX bytes, the most HAProxy accepts. Returns like
 * spop_frame_end(). */
int spop_agent_disconnect_encode(struct spop_writer *w, enum spop_status status,
                                 const char *message);

/* Human text of a status code, as HAProxy words it; never NULL. */
const char *spop_status_str(enum spop_status status);

#endif
