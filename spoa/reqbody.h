/* reqbody: what the agent needs from a request body (model, stream flag, output bounds), read from
 * the prefix HAProxy buffered. Pure functions over (pointer, length); called by the
 * I/O threads for every decision and fuzzed in isolation. */
#ifndef TALLY_REQBODY_H
#define TALLY_REQBODY_H

#include <stddef.h>

#define REQBODY_MODEL_MAX 256

enum reqbody_status {
	REQBODY_EMPTY,       /* no body (or only white space) */
	REQBODY_COMPLETE,    /* one whole JSON object (validated with cJSON) */
	REQBODY_PREFIX,      /* a valid prefix of a JSON object that ends early: HAProxy's
	                        buffer cut it; members after the cut are unknown */
	REQBODY_INVALID,     /* not JSON, not an object, or an ambiguous model/stream */
};

struct reqbody_info {
	int has_model;                  /* a string "model" member was seen */
	int model_unusable;             /* it was too long, or held NUL or control bytes:
	                                   no registered model can match it */
	char model[REQBODY_MODEL_MAX];  /* decoded, NUL-terminated when has_model */
	int stream;                     /* 1 true, 0 false or absent, -1 not seen in a prefix */
	int has_stream_options;         /* a member any reader could take for "stream_options" */
	size_t open_end;                /* offset just past the object's opening brace */
	/* Output bounds, a hint for how large the response may grow (exact key spellings
	 * only: a misread hint costs the capture path, never the verdict). */
	long max_tokens;                /* largest max_tokens / max_completion_tokens; -1 none */
	int many_outputs;               /* n other than 1, or logprobs: output beyond max_tokens */
};

/* Inspects body[0..len). Never reads past len; body need not be NUL-terminated, and
 * may be NULL when len is 0. Only top-level members count.
 *
 * Upstream JSON parsers differ: Python's keeps the last of duplicated keys, Go's
 * matches keys without regard to case (and folds U+017F to s, U+212A to k). A body is
 * INVALID when two members could be "model" (or "stream") to any of them, or when a
 * member is one only to some, so that the model judged here is the model served. */
enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out);

#endif
