/* longbody: request bodies longer than one SPOP frame, assembled from the pieces
 * HAProxy 3.4+ sends from its large buffer (tally.cfg, "tally-piece"), so that the
 * decision reads the whole body rather than its first frame's worth. Shared by the I/O
 * threads: one request's pieces may arrive over different SPOP connections, in order
 * (HAProxy waits for each piece's ACK before it sends the next).
 *
 * Bounded: at most max_bytes reserved at once, key_max_bytes by the bodies of one key
 * (so that one key holder's stalled bodies cannot take every other key's room), and
 * LONGBODY_BODY_MAX per body; a piece that would pass any is refused, and that request is judged on its first frame as
 * on older HAProxy versions. Each body reserves at least the large buffer HAProxy holds
 * it in while it arrives (hold, tally.cfg's tune.bufsize.large), so max_bytes bounds
 * HAProxy's large buffers for bodies in assembly as well as the agent's copies. A body
 * whose decision never comes (the client went between its pieces, the decision came
 * first) is dropped LONGBODY_TTL_MS after its first piece. Times are monotonic ms. */
#ifndef TALLY_LONGBODY_H
#define TALLY_LONGBODY_H

#include <stddef.h>
#include <stdint.h>

#define LONGBODY_BODY_MAX (1 << 20)   /* tally.cfg sends this much at most */
#define LONGBODY_TTL_MS 60000
#define LONGBODY_ID_MAX 64

struct longbody;

/* NULL on allocation failure. */
struct longbody *longbody_new(size_t max_bytes, size_t key_max_bytes);
void longbody_free(struct longbody *lb);

/* Appends data[0..len) at offset off of the body of request id, whose whole size is
 * total. off 0 starts the body of key (dropping any earlier one of that id), reserving
 * max(total, hold); any other off must be the length received so far (key is then not
 * looked at). Returns the length received now (the next piece's offset), or -1 when
 * refused: an id that is empty or longer than LONGBODY_ID_MAX, total <= 0 or above
 * LONGBODY_BODY_MAX, an empty piece, one out of order or past total, or no room left
 * (in all, or in key's key_max_bytes). A refused piece drops what the id had. */
int64_t longbody_append(struct longbody *lb, const char *id, size_t idlen, int64_t key,
                        int64_t off, int64_t total, int64_t hold, const char *data, size_t len,
                        int64_t now_ms);

/* Takes the body of id if all of its total bytes came: 1 and *body (malloc'd, the
 * caller's to free) and *len; else 0, and an incomplete body of id is dropped. */
int longbody_take(struct longbody *lb, const char *id, size_t idlen, char **body, size_t *len,
                  int64_t now_ms);

/* Bytes reserved now (for tests). */
size_t longbody_bytes(struct longbody *lb);

#endif
