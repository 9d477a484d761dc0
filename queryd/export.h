/* export: /api/export, request rows streamed as CSV or NDJSON through an MHD callback
 * response, never built in memory. Each export opens its own read-only connection
 * and statement: one statement is one snapshot (on PostgreSQL too, its rows streamed
 * one at a time), and the connection's read transaction lasts the whole download,
 * which must not freeze what the thread's shared connection sees for other requests.
 * MHD calls back on the thread serving the connection. */
#ifndef QUERYD_EXPORT_H
#define QUERYD_EXPORT_H

#include <microhttpd.h>
#include <stddef.h>

#include "params.h"

/* A response streaming the rows p selects (p->key already resolved to key_id) from
 * store (a path or a postgresql:// URL), with Content-Type and Content-Disposition
 * set; it owns the connection and statement and frees them when MHD is done with it.
 * NULL with a message in err when the database cannot be opened or the statement
 * prepared. */
struct MHD_Response *export_response(const char *store, const struct params *p,
                                     char *err, size_t errlen);

#endif
