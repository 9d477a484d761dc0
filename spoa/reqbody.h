/* reqbody: what the agent needs from a request body (model, stream flag, output bounds), read from
 * the prefix HAProxy buffered. Pure functions over (pointer, length); called by the
 * I/O threads for every decision and fuzzed in isolation. */
#ifndef TALLY_REQBODY_H
#define TALLY_REQBODY_H

#include <stddef.h>

#include "acct-t.h"

#define REQBODY_MODEL_MAX 256

enum reqbody_status {
	REQBODY_EMPTY,       /* no body (or only white space) */
	REQBODY_COMPLETE,    /* one whole JSON object (validated with cJSON) */
	REQBODY_PREFIX,      /* a valid prefix of a JSON object that ends early: HAProxy's
	                        buffer cut it; members after the cut are unknown */
	REQBODY_INVALID,     /* not JSON, not an object, or an ambiguous model/stream */
};

/* The top-level "stream_options" member, where the usage amendment edits it. Offsets
 * are into the body. */
struct reqbody_stream_options {
	int present;                    /* the member is there (spelled exactly, once) */
	int whole;                      /* its value was seen to its end */
	int is_object;                  /* its value is an object */
	size_t value_at, value_len;     /* the value's text */
	size_t open_end;                /* object: offset just past its '{' */
	int empty;                      /* object: no member */
	int include_usage;              /* object: -1 no include_usage, 1 true, 0 other */
	size_t iu_at, iu_len;           /* object: include_usage's value text */
};

/* reqbody_info.server_tools */
#define REQBODY_TOOL_WEB_SEARCH 1   /* a web search, which Anthropic counts per call */
#define REQBODY_TOOL_OTHER 2        /* any other tool the provider runs, or one nobody can
                                       judge */

/* An end user a body names (docs/limits.md, "End users"). */
enum reqbody_end_user_state {
	REQBODY_END_USER_NONE,          /* absent, or null */
	REQBODY_END_USER_OK,            /* id holds it, decoded */
	REQBODY_END_USER_BAD,           /* not a string, named twice, or not an id the
	                                   gateway keeps (enduser_id_ok) */
};

struct reqbody_end_user {
	enum reqbody_end_user_state state;
	int rank;                       /* the member it came from: a higher one wins */
	char id[ACCT_END_USER_MAX];     /* NUL-terminated when OK */
};

struct reqbody_info {
	int has_model;                  /* a string "model" member was seen */
	int model_unusable;             /* it was too long, or held NUL or control bytes:
	                                   no registered model can match it */
	char model[REQBODY_MODEL_MAX];  /* decoded, NUL-terminated when has_model */
	int stream;                     /* 1 true, 0 false or absent, -1 not seen in a prefix */
	struct reqbody_stream_options stream_options;
	size_t open_end;                /* offset just past the object's opening brace */
	/* Output bounds, a hint for how large the response may grow (a misread hint costs
	 * the capture path, never the verdict). */
	long max_tokens;                /* largest max_tokens / max_completion_tokens; -1 none */
	long max_output_tokens;         /* the Responses API's bound; -1 none (kept apart: a
	                                   chat upstream ignores it) */
	int many_outputs;               /* a member that grows the answer beyond max_tokens:
	                                   n or best_of other than 1, logprobs, top_logprobs,
	                                   echo, audio, modalities, tools (server tools' results),
	                                   web_search_options, mcp_servers */
	int hints_ambiguous;            /* a hint member twice, or spelled so that only some
	                                   readers take it (MAX_TOKENS): its bound is unknown */
	int stateful;                   /* previous_response_id or conversation, not null (or
	                                   a variant of either): the Responses API would read
	                                   state stored upstream under the operator's account */
	/* When the only state named is one previous_response_id, spelled exactly, whose
	 * value is a plain string acct_response_id_ok takes (no escapes): that id, which the
	 * gateway can check against who made it. "" otherwise. */
	char previous_response_id[ACCT_RESPONSE_ID_MAX];
	int stateful_other;             /* any other state named: a conversation, a variant
	                                   or a second reference, an id of another form */
	int store_off;                  /* "store": false: the Responses API keeps nothing */
	int store_ambiguous;            /* "store" twice, or spelled so only some readers
	                                   take it: whether it stores is unknown */
	int unaccountable;              /* "background" other than false or null (its usage
	                                   comes only to later reads), or a "request_id" (a
	                                   self-hosted server makes it the response's id,
	                                   which a key could then choose), in any spelling */
	int item_reference;             /* a Responses "input" item of type item_reference
	                                   (an item stored upstream, under the operator's
	                                   account), one whose type cannot be judged, or an
	                                   "input" twice or spelled so only some readers
	                                   take it */
	char service_tier[ACCT_TIER_MAX]; /* the tier asked for, a plain name; "" none */
	int server_tools;               /* REQBODY_TOOL_*: tools the provider would run
	                                   (among the tools seen; "tools", "web_search_options"
	                                   or "mcp_servers" twice or spelled so that only
	                                   some readers take them: OTHER) */
	int audio_out;                  /* spoken output asked for ("audio", or "audio" among
	                                   the "modalities"), or either member ambiguous */
	int audio_in;                   /* audio given as input, at any depth of a whole body
	                                   (REQBODY_COMPLETE only): a "type" of
	                                   "input_audio" or an "input_audio" member, not
	                                   null, names matched as Go matches them */
	int url_images, url_files;      /* inputs given by reference (a URL or a file id, not
	                                   inline data) at any depth of a whole body: their
	                                   tokens are none of the body's bytes */
	int cache_write;                /* a "cache_control" member, not null, at any depth of
	                                   a whole body (REQBODY_COMPLETE only): Anthropic
	                                   writes the prefix to its cache, a class apart */
	int tier_unknown;               /* service_tier in another form, twice, or spelled
	                                   so that only some readers take it */
	/* The end user named for the OpenAI API (safety_identifier, else user) and for
	 * Anthropic's (metadata.user_id): members spelled exactly (another spelling is
	 * another member to the gateway, which alone reads end users). */
	struct reqbody_end_user openai_user;
	struct reqbody_end_user anthropic_user;
};

/* Inspects body[0..len). Never reads past len; body need not be NUL-terminated, and
 * may be NULL when len is 0. Only top-level members count.
 *
 * Upstream JSON parsers differ: Python's keeps the last of duplicated keys, Go's
 * matches keys without regard to case (and folds U+017F to s, U+212A to k). A body is
 * INVALID when two members could be "model" (or "stream", "stream_options", or
 * "include_usage" inside it) to any of them, or when a member is one only to some, so
 * that the model judged here is the model served and the usage asked for is asked
 * for. */
enum reqbody_status reqbody_inspect(const char *body, size_t len, struct reqbody_info *out);

#endif
