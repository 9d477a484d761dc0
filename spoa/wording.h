/* wording: the bodies the gateway answers a decision with, in the client's API's shape.
 * Pure; runs on the I/O threads for every NOTIFY that is not allowed through. */
#ifndef TALLY_WORDING_H
#define TALLY_WORDING_H

#include <stddef.h>

#include "decision.h"
#include "modelbudget.h"
#include "quota.h"
#include "usageview.h"

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

/* One budget per model of a level (MODELBUDGET_PER_OWNER_MAX at most), in its period. */
struct wording_usage_model {
	const struct kt_model_budget *b;
	int64_t since_ms, until_ms;
	int64_t spent_micros, as_of_ms;
};

/* One level of what GET /tally/v1/usage reports: the key, or its team. */
struct wording_usage_level {
	struct quota_cfg cfg;         /* its limits */
	enum quota_period period;     /* its budget's; no budget: QUOTA_PERIOD_MONTH */
	int64_t since_ms, until_ms;   /* the period (total: 0 and INT64_MAX) */
	int64_t spent_micros;         /* charged in it (usageview.h) */
	int64_t as_of_ms;             /* when that was read */
	struct quota_status st;       /* its windows (quota_peek) */
	int64_t in_flight;            /* its requests in flight on this node */
	struct wording_usage_model models[MODELBUDGET_PER_OWNER_MAX];  /* its budgets per */
	size_t nmodels;                                                /* model, by name */
};

struct wording_usage {
	struct wording_usage_level key;
	int team_shown;               /* the key's team shows its figures to its keys: team */
	struct wording_usage_level team;
};

/* Writes the body of a DECISION_USAGE_REPORTED answer for d's key (and its team, named
 * always, its figures when u->team_shown) into buf. Returns its length, or -1 if cap
 * cannot hold it. */
int wording_usage_json(const struct decision *d, const struct wording_usage *u, char *buf,
                       size_t cap);

/* Writes the body of GET /tally/v1/usage/end_users (DECISION_USAGE_REPORTED with
 * d->end_users_page) into buf: d's key, l's period and as_of_ms, then the n end users of
 * eu, as many as cap holds with the answer's end (has_more and the next page's path say
 * where the rest begin). resume: where the next page begins when all n fit, NULL when
 * none follows, "" after eu's last (d->page_after with none). Returns its length, or
 * -1 if cap cannot hold a page of one. */
int wording_end_users_json(const struct decision *d, const struct wording_usage_level *l,
                           const struct usageview_end_user *eu, int n, const char *resume,
                           char *buf, size_t cap);

#endif
