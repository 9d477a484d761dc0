/* luacap: haproxy/capture.lua's answer reader run under an embedded Lua
 * (tests/lua/answer.lua, on the stand-in of tests/lua/haproxy.lua), so that C tests and
 * fuzz targets read answers through the same code HAProxy runs. The tree's root is
 * TALLY_ROOT from the environment, else the checkout it was built in. Test code only. */
#ifndef TALLY_TEST_LUACAP_H
#define TALLY_TEST_LUACAP_H

#include <stddef.h>
#include <stdint.h>

/* The record field (txn.tally.cap) the filter publishes for body handed to it in
 * chunks of split bytes (0: at once), into out (cap bytes, NUL-terminated); *ws the web
 * searches counted (-1: none asked). Returns 0, or -1 if Lua failed (message on
 * stderr) or published nothing. */
int luacap_read(const char *body, size_t len, size_t split, int sse, int count_ws,
                char *out, size_t cap, int64_t *ws);

/* The summary part of a record field ("c2 K N <summary>"), or NULL. */
const char *luacap_summary(const char *field);

#endif
