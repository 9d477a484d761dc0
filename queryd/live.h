/* live: queryd's client of the agent's control socket (docs/control.md): one status
 * request per call on a fresh connection, its msgpack reply turned into JSON. Runs on
 * the request thread that calls it; blocks it at most timeout_ms. */
#ifndef QUERYD_LIVE_H
#define QUERYD_LIVE_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define LIVE_TIMEOUT_MS 500
#define LIVE_REPLY_MAX (1024 * 1024)   /* a status reply is ~300 bytes */

/* Asks the agent listening on the unix socket path for {"cmd": "status"}. Returns the
 * reply's fields but "ok" as a new JSON object (the caller owns it), or NULL with the
 * reason in err: no agent, timeout, a malformed reply or an error reply. */
cJSON *live_status(const char *path, int timeout_ms, char *err, size_t errlen);

/* Decodes one reply payload (peer input: any bytes are safe; fuzzed by
 * tests/fuzz/fuzz_live_reply.c). A map with "ok": true gives the other fields as a
 * JSON object the caller owns; anything else NULL with err set. */
cJSON *live_reply_decode(const unsigned char *data, size_t len, char *err, size_t errlen);

#endif
