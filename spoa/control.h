/* control: the agent's local control socket, for queryd's live view and operators'
 * tools. A unix stream socket (mode 0600) speaking msgpack, framed both ways by a
 * 4-byte big-endian length; the protocol is in docs/control.md. Runs on the main
 * thread's libev loop; the frame and request decoders are pure (and fuzzed). */
#ifndef TALLY_CONTROL_H
#define TALLY_CONTROL_H

#include <ev.h>
#include <stddef.h>

#include "live-t.h"

#define CONTROL_FRAME_MAX        65536  /* request payload bytes; replies may be longer */
#define CONTROL_MAX_CONNS        16
#define CONTROL_TIMEOUT          60.0   /* seconds a connection may go without a reply */
#define CONTROL_INFLIGHT_DEFAULT 100
#define CONTROL_INFLIGHT_CAP     10000
#define CONTROL_VERSION          "tally-agent 0.3"

enum control_cmd { CONTROL_STATUS, CONTROL_KEYS, CONTROL_INFLIGHT };

struct control_request {
	enum control_cmd cmd;
	size_t max;                  /* inflight: requests listed at most */
};

enum control_frame {
	CONTROL_FRAME_PARTIAL,       /* need more bytes */
	CONTROL_FRAME_WHOLE,         /* a frame: 4 + *payload_len bytes */
	CONTROL_FRAME_TOO_LARGE,     /* *payload_len is over CONTROL_FRAME_MAX */
};

struct control;

/* Listens on the unix socket path (a stale socket file there is replaced) and answers
 * from the process counters (stats) and live, which must outlive it. NULL with err
 * set. */
struct control *control_start(struct ev_loop *loop, const char *path,
                              const struct live_view *live, char *err, size_t errlen);

/* Closes the socket and its connections, removes the socket file unless another
 * process has replaced it since, and frees c. */
void control_stop(struct control *c);

/* Looks for one frame at the start of in[0, len). Pure. */
enum control_frame control_frame_parse(const unsigned char *in, size_t len, size_t *payload_len);

/* Decodes one request from a frame's payload into *req. Returns NULL, or the message
 * for the error reply (a static string). Pure; any bytes are safe. */
const char *control_request_decode(const unsigned char *data, size_t len,
                                   struct control_request *req);

#endif
