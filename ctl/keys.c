/* keys: API keys (create, set, list, revoke, their team and tags) and the gateway
 * secret HAProxy sends, derived from the same key-hashing secret. tallyctl is
 * single-threaded. */
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "args.h"
#include "gwsecret.h"
#include "keys.h"
#include "teams.h"
#include "tier.h"

/* The nullable policy columns of keys, by option; the order of the key set SQL. */
static const enum ctl_opt_id keys_policy_opts[] = { OPT_SERVICE_TIERS, OPT_SERVER_TOOLS,
                                                    OPT_AUDIO, OPT_CACHE_WRITES };
_Static_assert(sizeof(keys_policy_opts) / sizeof(keys_policy_opts[0]) == KEYS_NPOLICIES,
               "keys.h sizes struct keys_opts by this list");

/* The values of those but --service-tiers; the last clears the column. */
static const char *const keys_policy_words[] = { "priced", "allow", "deny", "inherit" };
#define KEYS_INHERIT 3

/* The values of keys.end_users (the schema's CHECK): whether a request names its end
 * user (docs/limits.md, "End users"). */
static const char *const keys_end_users_words[] = { "optional", "required", "forbidden" };

#define KEYS_NWORDS(w) (sizeof(w) / sizeof((w)[0]))

static const struct limits_sql keys_limits_sql = LIMITS_SQL("keys", "key_models", "key_id");

#define KEYS_EXISTS_SQL "SELECT 1 FROM keys WHERE name = ?1"

void keys_opts_free(struct keys_opts *o)
{
	limits_free(&o->lim);
}

/* Checks everything that needs no database. The caller frees o even on failure. */
int keys_opts_parse(const struct ctl_command *cmd, const struct ctl_args *a,
                    struct keys_opts *o)
{
	size_t i, w;
	int status;

	status = limits_parse(cmd, a, &o->lim);
	if (status != CTL_OK)
		return status;
	o->def = a->val[OPT_DEFAULT_MODEL];
	if (o->def && !args_valid_model(o->def))
		return ctl_usage(cmd, "invalid model name '%s' for --default-model", o->def);
	if (o->def && o->lim.nmodels > 0 && !limits_has_model(&o->lim, o->def))
		return ctl_usage(cmd, "default model '%s' is not in --models", o->def);
	o->team_given = a->val[OPT_TEAM] != NULL;
	/* "none" takes the key out of its team. */
	if (o->team_given && strcmp(a->val[OPT_TEAM], "none") != 0) {
		o->team = a->val[OPT_TEAM];
		status = args_check_name(cmd, "team", o->team);
		if (status != CTL_OK)
			return status;
	}
	for (i = 0; i < KEYS_NPOLICIES; i++) {
		enum ctl_opt_id id = keys_policy_opts[i];
		const char *v = a->val[id];

		o->policy_given[i] = v != NULL;
		if (!v)
			continue;
		/* "inherit", and an empty tier list, clear the column: the agent's default. */
		if (id == OPT_SERVICE_TIERS) {
			if (*v == '\0' || strcmp(v, "inherit") == 0)
				continue;
			if (!tier_list_ok(v))
				return ctl_usage(cmd, "invalid value '%s' for --%s: expected tier names"
				                 " (a-z 0-9 _ -) separated by commas, '' or inherit", v,
				                 ctl_opts[id].name);
		} else {
			status = args_parse_word(cmd, id, v, keys_policy_words,
			                         KEYS_NWORDS(keys_policy_words), &w);
			if (status != CTL_OK)
				return status;
			if (w == KEYS_INHERIT)
				continue;
		}
		o->policy[i] = v;
	}
	if (a->val[OPT_END_USERS]) {
		status = args_parse_word(cmd, OPT_END_USERS, a->val[OPT_END_USERS],
		                         keys_end_users_words, KEYS_NWORDS(keys_end_users_words), &w);
		if (status != CTL_OK)
			return status;
		o->end_users = keys_end_users_words[w];
	}
	o->tags_given = a->val[OPT_TAGS] != NULL;
	if (o->tags_given)
		return args_parse_tags(cmd, OPT_TAGS, a->val[OPT_TAGS], o->tags);
	return CTL_OK;
}

/* Fails unless every model named by --models and --default-model, and the team named
 * by --team, exist; the team's id into o. */
static int keys_names_exist(struct ctl *ctl, struct keys_opts *o)
{
	int64_t id;

	if (limits_models_exist(ctl, &o->lim) != CTL_OK ||
	    (o->def && ctl_model_id(ctl, o->def, &id) != CTL_OK) ||
	    (o->team && teams_id(ctl, o->team, &o->team_id) != CTL_OK))
		return CTL_FAIL;
	return CTL_OK;
}

/* Writes the given options to key id inside the caller's transaction; options not
 * given keep the stored values. */
static int keys_apply(struct ctl *ctl, int64_t id, const char *name, const struct keys_opts *o)
{
	int found;

	if (limits_write(ctl, &keys_limits_sql, id, &o->lim) != CTL_OK ||
	    ctl_exec(ctl,
	             "UPDATE keys SET"
	             " default_model = coalesce(?2, default_model),"
	             " service_tiers = CASE WHEN ?3 <> 0 THEN ?4 ELSE service_tiers END,"
	             " server_tools = CASE WHEN ?5 <> 0 THEN ?6 ELSE server_tools END,"
	             " audio = CASE WHEN ?7 <> 0 THEN ?8 ELSE audio END,"
	             " cache_writes = CASE WHEN ?9 <> 0 THEN ?10 ELSE cache_writes END,"
	             " team_id = CASE WHEN ?11 <> 0 THEN ?12 ELSE team_id END,"
	             " end_users = coalesce(?13, end_users),"
	             " tags = CASE WHEN ?14 <> 0 THEN ?15 ELSE tags END"
	             " WHERE id = ?1",
	             "itititititintit", id, o->def, o->policy_given[0], o->policy[0],
	             o->policy_given[1], o->policy[1], o->policy_given[2], o->policy[2],
	             o->policy_given[3], o->policy[3], (int64_t)o->team_given,
	             o->team ? &o->team_id : NULL, o->end_users, o->tags_given,
	             o->tags[0] ? o->tags : NULL) < 0)
		return CTL_FAIL;
	if ((o->tags_given || o->team_given) && teams_check_key_tags(ctl, id) != CTL_OK)
		return CTL_FAIL;
	/* key set may change the list or the default alone: check the stored pair. */
	found = ctl_find(ctl, NULL,
	                 "SELECT 1 FROM keys k WHERE k.id = ?1 AND k.default_model IS NOT NULL"
	                 " AND EXISTS (SELECT 1 FROM key_models WHERE key_id = k.id)"
	                 " AND NOT EXISTS (SELECT 1 FROM key_models"
	                 "                 WHERE key_id = k.id AND model = k.default_model)",
	                 "i", id);
	if (found != 0)
		return found > 0 ? ctl_error("key '%s': its default model would not be in its "
		                             "allowed models (see --default-model)", name) : CTL_FAIL;
	return CTL_OK;
}

int keys_create(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	unsigned char secret[KEYHASH_SECRET_LEN], hash[KEYHASH_LEN];
	char key[KEYHASH_KEY_LEN + 1], prefix[KEYHASH_PREFIX_LEN + 1];
	struct keys_opts o = { 0 };
	int64_t key_id = 0;
	int status;

	status = args_check_name(ctl->cmd, "key", name);
	if (status != CTL_OK)
		goto out;
	status = keys_opts_parse(ctl->cmd, a, &o);
	if (status != CTL_OK)
		goto out;

	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_secret_load(ctl, secret) != CTL_OK ||
	    ctl_begin(ctl) != CTL_OK || ctl_name_free(ctl, "key", KEYS_EXISTS_SQL, name) != CTL_OK ||
	    keys_names_exist(ctl, &o) != CTL_OK)
		goto out;
	if (keyhash_generate(key, sizeof(key)) < 0 || keyhash_prefix(key, prefix, sizeof(prefix)) < 0) {
		ctl_error("cannot generate a key: no randomness available");
		goto out;
	}
	keyhash_compute(secret, key, KEYHASH_KEY_LEN, hash);
	if (ctl_insert_named(ctl, ctl_prepare(ctl, "INSERT INTO keys (name, prefix, hash, created_at)"
	                                      " VALUES (?1, ?2, ?3, ?4) RETURNING id", "ttbi", name,
	                                      prefix, hash, (size_t)KEYHASH_LEN, db_now()),
	                     "key", KEYS_EXISTS_SQL, name, &key_id) != CTL_OK ||
	    keys_apply(ctl, key_id, name, &o) != CTL_OK || ctl_commit(ctl) != CTL_OK)
		goto out;
	/* Shown once: only the hash and the prefix are stored. */
	printf("%s\n", key);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(hash, sizeof(hash));
	keys_opts_free(&o);
	return status;
}

int keys_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	struct keys_opts o = { 0 };
	int status, found;
	int64_t key_id;

	status = args_need_option(ctl->cmd, a);
	if (status != CTL_OK)
		goto out;
	status = keys_opts_parse(ctl->cmd, a, &o);
	if (status != CTL_OK)
		goto out;

	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, &key_id, "SELECT id FROM keys WHERE name = ?1", "t", name);
	if (found != 1) {
		if (found == 0)
			ctl_error("no key named '%s'", name);
		goto out;
	}
	if (keys_names_exist(ctl, &o) != CTL_OK || keys_apply(ctl, key_id, name, &o) != CTL_OK ||
	    ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("updated key %s\n", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	keys_opts_free(&o);
	return status;
}

int keys_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "ID", "id", COL_INT },
		{ "NAME", "name", COL_TEXT },
		{ "TEAM", "team", COL_TEXT },
		{ "PREFIX", "prefix", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
		{ "REVOKED", "revoked_at", COL_TIME },
		{ "MODELS", "models", COL_LIST },
		{ "DEFAULT_MODEL", "default_model", COL_TEXT },
		{ "SERVICE_TIERS", "service_tiers", COL_CSV },
		{ "SERVER_TOOLS", "server_tools", COL_TEXT },
		{ "AUDIO", "audio", COL_TEXT },
		{ "CACHE_WRITES", "cache_writes", COL_TEXT },
		{ "END_USERS", "end_users", COL_TEXT },
		{ "TAGS", "tags", COL_CSV },
		LIMITS_COLS,
	};

#define KEY_LIST_SQL(MODELS)                                                            \
	"SELECT k.id, k.name, t.name, k.prefix, k.created_at, k.revoked_at, " MODELS ","   \
	" k.default_model, k.service_tiers, k.server_tools, k.audio, k.cache_writes,"     \
	" k.end_users, k.tags,"                                                           \
	" k.rpm, k.tpm, k.max_concurrent, k.budget_micros, k.budget_period, k.budget_tz"  \
	" FROM keys k LEFT JOIN teams t ON t.id = k.team_id ORDER BY k.id"
	static const struct ctl_sql q = LIMITS_LIST_SQL(KEY_LIST_SQL, "key_models", "key_id", "k.id");
#undef KEY_LIST_SQL

	return ctl_print_table(ctl, q, cols, (int)(sizeof(cols) / sizeof(cols[0])),
	                       ctl_list_printer(a), "");
}

int keys_revoke(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	int status = CTL_FAIL, found, changed;
	int64_t id;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, &id, "SELECT id FROM keys WHERE name = ?1", "t", name);
	if (found != 1) {
		if (found == 0)
			ctl_error("no key named '%s'", name);
		goto out;
	}
	changed = ctl_exec(ctl, "UPDATE keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
	                   "ii", id, db_now());
	if (changed <= 0) {
		if (changed == 0)
			ctl_error("key '%s' is already revoked", name);
		goto out;
	}
	if (ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("revoked key %s\n", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

/* ---- gateway secret ---- */

/* Prints the gateway secret the agent expects, for HAProxy's environment: the agent's
 * own TALLY_GATEWAY_SECRET if set here too, else the one derived from the key-hashing
 * secret (created if missing, as the agent would). */
int keys_gateway_secret(struct ctl *ctl, const struct ctl_args *a)
{
	unsigned char secret[KEYHASH_SECRET_LEN];
	struct gwsecret gw;
	char err[256];
	int rc = gwsecret_from_env(&gw, err, sizeof(err));

	(void)a;
	if (rc < 0)
		return ctl_error("%s: %s", GWSECRET_ENV, err);
	if (rc == 0) {
		if (ctl_secret_load(ctl, secret) != CTL_OK)
			return CTL_FAIL;
		gwsecret_derive(secret, &gw);
		OPENSSL_cleanse(secret, sizeof(secret));
	}
	printf("%s\n", gw.text);
	return CTL_OK;
}
