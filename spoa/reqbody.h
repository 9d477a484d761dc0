/* reqbody: what the agent needs from a request body (model, stream flag), read from
 * the prefix HAProxy buffered. Pure functions over (pointer, length); called by the
 * I/O threads for every decision and fuzzed in isolation. */
#ifndef TALLY_REQBODY_H
#define TALLY_REQBODY_H

#include <stddef.h>

#define REQBODY_MODEL_MAX 256

enum reqbody_status {
	REQBODY_EMPTY,       /* no body (or only white space) */
	REQBODY_COMPLETE,    /* a whole JSON object, parsed with cJSON */
	REQBODY_PREFIX,      /* a valid prefix of a JSON object that ends early: HAProxy's
	                        buffer truncated it; fields after the cut are unknown */
	REQBODY_INVALID,     /* not JSON, not an object, or a duplicated model/stream key */
};

struct reqbody_info {
	int has_model;                  /* a string "model" member was seen */
	int model_too_long;             /* it was longer than REQBODY_MODEL_MAX - 1 bytes */
	char model[REQBODY_MODEL_MAX];  /* NUL-terminated when has_model */
	int stream;                     /* 1 true, 0 false or absent, -1 not seen in a prefix */
};

/* Inspects body[0..len). Never reads past len; body need not be NUL-terminated.
 * Only top-level members count. A duplicated "model" or "stream" member is INVALID,
 * because upstreams disagree on which copy wins and the allow-list must judge the
 * one the upstream will use. */
enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out);

#endif
