/* wording: the bodies the gateway answers a decision with, in the client's API's shape.
 * Pure; runs on the I/O threads for every NOTIFY that is not allowed through. */
#ifndef TALLY_WORDING_H
#define TALLY_WORDING_H

#include <stddef.h>

#include "decision.h"

/* Writes the JSON error body for a denial into buf: OpenAI's error shape, or Anthropic's
 * for /v1/messages paths. Returns its length, or -1 if cap is too small. */
int wording_error_json(const struct decision *d, const struct decision_request *req,
                       char *buf, size_t cap);

/* Writes the body of a DECISION_MODELS_LISTED answer into buf: the models d's key may
 * use of t, those of the API the client speaks (Anthropic's shape when the request
 * carries anthropic-version or x-api-key, else OpenAI's), by name; or the one model
 * d->model when the path named it. A list longer than cap holds what fits (Anthropic's
 * has_more says so). Returns its length, or -1 if cap cannot hold an empty list. */
int wording_models_json(const struct keytable *t, const struct decision *d,
                        const struct decision_request *req, char *buf, size_t cap);

#endif
