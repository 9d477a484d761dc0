/* keys: the key commands (create, set, list, revoke) and gateway-secret, the two that
 * use the key-hashing secret. tallyctl is single-threaded. */
#ifndef TALLY_KEYS_H
#define TALLY_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "ctl.h"
#include "limits.h"
#include "tags.h"

/* The nullable policy options of a key, in the order of the key set SQL. */
#define KEYS_NPOLICIES   4   /* --service-tiers, --server-tools, --audio, --cache-writes */

/* Those and --end-users, which is never NULL. */
#define KEY_POLICY_OPTS (OPT(OPT_SERVICE_TIERS) | OPT(OPT_SERVER_TOOLS) | OPT(OPT_AUDIO) | \
                         OPT(OPT_CACHE_WRITES) | OPT(OPT_END_USERS))

/* The options key create and key set share, validated. */
struct keys_opts {
	struct limits lim;                    /* --models and the limits */
	const char *def;                      /* --default-model; NULL: unchanged */
	int team_given;                       /* --team given */
	const char *team;                     /* its team's name; NULL: none */
	int64_t team_id;                      /* the team's id, once looked up */
	int64_t policy_given[KEYS_NPOLICIES]; /* 1 if the i-th policy option was given */
	const char *policy[KEYS_NPOLICIES];   /* its value, or NULL for "inherit" */
	const char *end_users;                /* --end-users; NULL: unchanged */
	int64_t tags_given;                   /* --tags given */
	char tags[TAGS_TEXT_MAX];             /* their canonical text; "": none */
};

/* Checks everything that needs no database. The caller frees o even on failure. */
int keys_opts_parse(const struct ctl_command *cmd, const struct ctl_args *a, struct keys_opts *o);
void keys_opts_free(struct keys_opts *o);

int keys_create(struct ctl *ctl, const struct ctl_args *a);
int keys_set(struct ctl *ctl, const struct ctl_args *a);
int keys_list(struct ctl *ctl, const struct ctl_args *a);
int keys_revoke(struct ctl *ctl, const struct ctl_args *a);
int keys_gateway_secret(struct ctl *ctl, const struct ctl_args *a);

#endif
