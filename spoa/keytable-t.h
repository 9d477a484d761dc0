/* Types of the agent's in-memory configuration snapshot: keys, teams, models, providers.
 * A snapshot is immutable once built; see keytable.h for its life cycle. */
#ifndef TALLY_KEYTABLE_T_H
#define TALLY_KEYTABLE_T_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "keyhash.h"
#include "price-t.h"
#include "quota.h"
#include "tags.h"

enum kt_api { KT_API_OPENAI, KT_API_ANTHROPIC };

struct kt_provider {
	int64_t id;             /* for linking models while loading */
	char *name;             /* for usage rows */
	char *backend;          /* HAProxy backend that serves this provider */
	enum kt_api api;
};

/* What a key may ask for that costs more (keys.server_tools, audio, cache_writes);
 * INHERIT: the agent's default (--server-tools, --audio, --cache-writes). */
enum kt_policy { KT_POLICY_INHERIT = 0, KT_POLICY_PRICED, KT_POLICY_ALLOW, KT_POLICY_DENY };

/* Whether a key's requests name the end user they serve (keys.end_users; docs/limits.md,
 * "End users"). */
enum kt_end_users { KT_END_USERS_OPTIONAL = 0, KT_END_USERS_REQUIRED, KT_END_USERS_FORBIDDEN };

struct kt_model {
	char *name;
	const struct kt_provider *provider;
	struct price_sheet prices;
	int64_t created_at;     /* unix seconds, as model lists show it */
	int64_t max_output;     /* its largest answer in tokens (models.max_output); 0: none */
};

/* A team above keys (docs/limits.md, "Teams"): its limits and allow-list hold for
 * every request of its keys, as their own do. */
struct kt_team {
	int64_t id;
	char *name;
	struct quota_cfg quota;                 /* 0 in a field: no such limit */
	int restricted;                         /* 0: every model; 1: only those in allowed */
	const struct kt_model **allowed;
	size_t nallowed;
	int members_see_usage;                  /* 1: the team's keys may read the team's
	                                         * figures on /tally/v1/usage */
	struct tags *tags;                      /* fixed tags (teams.tags); NULL: none */
	int end_user_limited;                   /* it has end users' limits */
	unsigned end_user_budgets;              /* of which budgets: bit 1 << quota_period */
	const struct kt_model_budget *model_budgets;  /* by model; NULL: none */
	size_t nmodel_budgets;
};

/* A tag's budget (tag_budgets; docs/limits.md, "Tags"): spent by every request that
 * carries the tag, whatever its key. */
struct kt_tag_budget {
	int64_t id;
	char tag[TAGS_TAG_MAX];                 /* name=value */
	struct quota_cfg quota;                 /* the budget alone */
};

/* End users' limits (end_user_limits; docs/limits.md, "End users"): a key's or a team's
 * (the other id 0), for one end user or, end_user "", for every one without a row of
 * its own. Counted per key and end user (quota_end_user_subject). */
struct kt_end_user_limit {
	int64_t key_id;
	int64_t team_id;
	char *end_user;
	struct quota_cfg quota;                 /* rpm, tpm and the budget; all 0: exempt */
};

/* A key's or a team's budget for one model (model_budgets; docs/limits.md, "Budgets per
 * model"), counted under an id of its own (quota_key_model_subject,
 * quota_team_model_subject). It covers the model of that name and its dated snapshots
 * (join_model_match). */
struct kt_model_budget {
	int64_t id;
	int64_t key_id;                         /* the key's or the team's, the other 0 */
	int64_t team_id;
	char *model;
	struct quota_cfg quota;                 /* the budget alone */
};

struct kt_key {
	int64_t id;
	unsigned char hash[KEYHASH_LEN];
	char *name;
	char *prefix;
	int revoked;
	const struct kt_model *default_model;   /* NULL: none, or not a known model */
	const struct kt_team *team;             /* NULL: none */
	/* What the key may use: its own allow-list narrowed by its team's. */
	int restricted;                         /* 0: every model; 1: only those in allowed */
	const struct kt_model **allowed;        /* known models of the allow-list */
	size_t nallowed;
	int own_restricted;                     /* the same of its own list alone, which */
	const struct kt_model **own_allowed;    /* says which level refused a model */
	size_t own_nallowed;
	struct quota_cfg quota;                /* 0 in a field: no such limit */
	char *service_tiers;                    /* comma-separated; NULL: the agent's default */
	enum kt_policy server_tools;
	enum kt_policy audio;
	enum kt_policy cache_writes;
	enum kt_end_users end_users;
	/* The tags every request of the key carries: its team's (teams.tags) over its own
	 * (keys.tags); NULL: none. fixed_tags_over: together they are more than TAGS_MAX,
	 * and the key's requests are refused rather than stored with some left out. */
	struct tags *fixed_tags;
	int fixed_tags_over;
	int end_user_limited;                   /* it or its team has end users' limits */
	unsigned end_user_budgets;              /* the periods of their budgets (bit 1 <<
	                                         * quota_period): what spend.c reads */
	const struct kt_model_budget *model_budgets;  /* its own, by model; NULL: none */
	size_t nmodel_budgets;
};

struct keytable {
	atomic_int refs;
	int64_t generation;                      /* meta.config_generation it was built from */
	unsigned char secret[KEYHASH_SECRET_LEN];
	struct kt_provider *providers;
	size_t nproviders;
	struct kt_model *models;                 /* sorted by name for binary search */
	size_t nmodels;
	struct kt_team *teams;                   /* sorted by id */
	size_t nteams;
	struct kt_tag_budget *tag_budgets;       /* sorted by tag, bytewise */
	size_t ntag_budgets;
	struct kt_end_user_limit *end_user_limits;   /* by key_id, team_id, end_user bytewise */
	size_t nend_user_limits;
	struct kt_model_budget *model_budgets;   /* by key_id, team_id, model bytewise */
	size_t nmodel_budgets;
	struct kt_key *keys;
	size_t nkeys;
	uint32_t *slots;                         /* open addressing on the hash: key index + 1 */
	size_t nslots;                           /* power of two, at least twice nkeys */
	char refused[512];                       /* while loading: the row refused, if any */
};

#endif
