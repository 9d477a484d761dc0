/* keys: API keys (create, set, list, revoke) and the gateway secret HAProxy sends,
 * derived from the same key-hashing secret. tallyctl is single-threaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "args.h"
#include "gwsecret.h"
#include "keys.h"
#include "tier.h"

#define CTL_LIMIT_MAX    1000000000000LL   /* rpm, tpm, max_concurrent */

/* The nullable limit columns of keys, by option; the order of the key set SQL. */
static const enum ctl_opt_id keys_limit_opts[] = { OPT_RPM, OPT_TPM, OPT_MAX_CONCURRENT,
                                                   OPT_BUDGET_USD };

/* The nullable policy columns of keys, by option; the order of the key set SQL. */
static const enum ctl_opt_id keys_policy_opts[] = { OPT_SERVICE_TIERS, OPT_SERVER_TOOLS,
                                                    OPT_AUDIO, OPT_CACHE_WRITES };
_Static_assert(sizeof(keys_limit_opts) / sizeof(keys_limit_opts[0]) == KEYS_NLIMITS &&
               sizeof(keys_policy_opts) / sizeof(keys_policy_opts[0]) == KEYS_NPOLICIES,
               "keys.h sizes struct keys_opts by these lists");

/* Splits a --models value in place into *items (owned by the caller, pointing into
 * csv). Rejects empty and malformed names. */
static int keys_split_models(const struct ctl_command *cmd, char *csv, char ***items, size_t *n)
{
	size_t count = 1, i;
	char *p;

	for (p = csv; *p; p++)
		count += *p == ',';
	*items = calloc(count, sizeof(**items));
	if (!*items)
		return ctl_error("out of memory");
	*n = count;
	for (i = 0, p = csv; i < count; i++) {
		char *comma = strchr(p, ',');

		if (comma)
			*comma = '\0';
		if (!args_valid_model(p))
			return ctl_usage(cmd, "invalid model name '%s' in --models", p);
		(*items)[i] = p;
		p = comma ? comma + 1 : p;
	}
	return CTL_OK;
}

static int keys_list_has(char *const *items, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (strcmp(items[i], s) == 0)
			return 1;
	}
	return 0;
}

void keys_opts_free(struct keys_opts *o)
{
	free(o->models);
	free(o->csv);
}

/* Checks everything that needs no database. The caller frees o even on failure. */
int keys_opts_parse(const struct ctl_command *cmd, const struct ctl_args *a,
                    struct keys_opts *o)
{
	size_t i;
	int status;

	if (a->val[OPT_MODELS]) {
		o->csv = strdup(a->val[OPT_MODELS]);
		if (!o->csv)
			return ctl_error("out of memory");
		status = keys_split_models(cmd, o->csv, &o->models, &o->nmodels);
		if (status != CTL_OK)
			return status;
	}
	o->def = a->val[OPT_DEFAULT_MODEL];
	if (o->def && !args_valid_model(o->def))
		return ctl_usage(cmd, "invalid model name '%s' for --default-model", o->def);
	if (o->def && o->models && !keys_list_has(o->models, o->nmodels, o->def))
		return ctl_usage(cmd, "default model '%s' is not in --models", o->def);
	for (i = 0; i < KEYS_NLIMITS; i++) {
		enum ctl_opt_id id = keys_limit_opts[i];
		const char *v = a->val[id];

		o->given[i] = v != NULL;
		/* "none" clears the limit: NULL in the database. */
		if (!v || strcmp(v, "none") == 0)
			continue;
		status = id == OPT_BUDGET_USD ?
			args_parse_usd(cmd, id, v, &o->value[i]) :
			args_parse_int(cmd, id, v, 1, CTL_LIMIT_MAX, ", or none for no limit", &o->value[i]);
		if (status != CTL_OK)
			return status;
		o->bound[i] = &o->value[i];
	}
	for (i = 0; i < KEYS_NPOLICIES; i++) {
		enum ctl_opt_id id = keys_policy_opts[i];
		const char *v = a->val[id];
		int tiers = id == OPT_SERVICE_TIERS;

		o->policy_given[i] = v != NULL;
		/* "inherit", and an empty tier list, clear the column: the agent's default. */
		if (!v || strcmp(v, "inherit") == 0 || (tiers && *v == '\0'))
			continue;
		if (tiers ? !tier_list_ok(v) :
		    strcmp(v, "priced") != 0 && strcmp(v, "allow") != 0 && strcmp(v, "deny") != 0)
			return ctl_usage(cmd, "invalid value '%s' for --%s: expected %s", v,
			                 ctl_opts[id].name, tiers ?
			                 "tier names (a-z 0-9 _ -) separated by commas, '' or inherit" :
			                 "priced, allow, deny or inherit");
		o->policy[i] = v;
	}
	o->period = a->val[OPT_BUDGET_PERIOD];
	if (o->period && strcmp(o->period, "day") != 0 && strcmp(o->period, "month") != 0 &&
	    strcmp(o->period, "total") != 0)
		return ctl_usage(cmd, "invalid value '%s' for --budget-period: expected day, month "
		                 "or total", o->period);
	return CTL_OK;
}

/* Fails unless every model named by --models and --default-model exists. */
static int keys_models_exist(struct ctl *ctl, const struct keys_opts *o)
{
	int64_t id;
	size_t i;

	for (i = 0; i < o->nmodels + (o->def != NULL); i++) {
		if (ctl_model_id(ctl, i < o->nmodels ? o->models[i] : o->def, &id) != CTL_OK)
			return CTL_FAIL;
	}
	return CTL_OK;
}

/* Writes the given options to key id inside the caller's transaction; options not
 * given keep the stored values. */
static int keys_apply(struct ctl *ctl, int64_t id, const char *name, const struct keys_opts *o)
{
	size_t i;
	int found;

	if (ctl_exec(ctl,
	             "UPDATE keys SET"
	             " rpm = CASE WHEN ?2 <> 0 THEN ?3 ELSE rpm END,"
	             " tpm = CASE WHEN ?4 <> 0 THEN ?5 ELSE tpm END,"
	             " max_concurrent = CASE WHEN ?6 <> 0 THEN ?7 ELSE max_concurrent END,"
	             " budget_micros = CASE WHEN ?8 <> 0 THEN ?9 ELSE budget_micros END,"
	             " budget_period = coalesce(?10, budget_period),"
	             " default_model = coalesce(?11, default_model),"
	             " service_tiers = CASE WHEN ?12 <> 0 THEN ?13 ELSE service_tiers END,"
	             " server_tools = CASE WHEN ?14 <> 0 THEN ?15 ELSE server_tools END,"
	             " audio = CASE WHEN ?16 <> 0 THEN ?17 ELSE audio END,"
	             " cache_writes = CASE WHEN ?18 <> 0 THEN ?19 ELSE cache_writes END"
	             " WHERE id = ?1",
	             "iininininttitititit", id, o->given[0], o->bound[0], o->given[1], o->bound[1],
	             o->given[2], o->bound[2], o->given[3], o->bound[3], o->period, o->def,
	             o->policy_given[0], o->policy[0], o->policy_given[1], o->policy[1],
	             o->policy_given[2], o->policy[2], o->policy_given[3], o->policy[3]) < 0)
		return CTL_FAIL;
	if (o->models) {
		if (ctl_exec(ctl, "DELETE FROM key_models WHERE key_id = ?1", "i", id) < 0)
			return CTL_FAIL;
		for (i = 0; i < o->nmodels; i++) {
			if (ctl_exec(ctl, "INSERT INTO key_models (key_id, model) VALUES (?1, ?2)"
			             " ON CONFLICT DO NOTHING", "it", id, o->models[i]) < 0)
				return CTL_FAIL;
		}
	}
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

/* Inserts the key row inside the caller's transaction, its id into *id. On PostgreSQL
 * another tallyctl may have inserted the name since this one looked (both saw none):
 * the unique constraint refuses the second, which then ends its transaction and, if
 * the name is there now, reports it as the check would. */
static int keys_insert(struct ctl *ctl, const char *name, const char *prefix,
                       const unsigned char hash[KEYHASH_LEN], int64_t *id)
{
	struct db_stmt *st;
	enum db_status rc;
	char err[512];

	st = ctl_prepare(ctl, "INSERT INTO keys (name, prefix, hash, created_at)"
	                 " VALUES (?1, ?2, ?3, ?4) RETURNING id",
	                 "ttbi", name, prefix, hash, (size_t)KEYHASH_LEN, db_now());
	if (!st)
		return CTL_FAIL;
	*id = 0;
	rc = db_step(st);
	if (rc == DB_ROW) {
		*id = db_col_int(st, 0);
		rc = db_step(st);
	}
	snprintf(err, sizeof(err), "%s", rc == DB_DONE ? "INSERT returned no id" : db_errmsg(ctl->db));
	db_finalize(st);
	if (rc == DB_DONE && *id > 0)
		return CTL_OK;
	if (rc == DB_CONSTRAINT) {
		ctl_rollback(ctl);
		if (ctl_find(ctl, NULL, "SELECT 1 FROM keys WHERE name = ?1", "t", name) == 1)
			return ctl_error("a key named '%s' already exists", name);
	}
	return ctl_error("database error: %s", err);
}

int keys_create(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	unsigned char secret[KEYHASH_SECRET_LEN], hash[KEYHASH_LEN];
	char key[KEYHASH_KEY_LEN + 1], prefix[KEYHASH_PREFIX_LEN + 1];
	struct keys_opts o = { 0 };
	int status, found;
	int64_t key_id = 0;

	if (!args_valid_name(name)) {
		status = ctl_usage(ctl->cmd, "invalid key name '%s': use 1-%d characters from "
		                   "A-Z a-z 0-9 . _ -", name, CTL_NAME_MAX);
		goto out;
	}
	status = keys_opts_parse(ctl->cmd, a, &o);
	if (status != CTL_OK)
		goto out;

	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_secret_load(ctl, secret) != CTL_OK ||
	    ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, NULL, "SELECT 1 FROM keys WHERE name = ?1", "t", name);
	if (found != 0) {
		if (found > 0)
			ctl_error("a key named '%s' already exists", name);
		goto out;
	}
	if (keys_models_exist(ctl, &o) != CTL_OK)
		goto out;
	if (keyhash_generate(key, sizeof(key)) < 0 || keyhash_prefix(key, prefix, sizeof(prefix)) < 0) {
		ctl_error("cannot generate a key: no randomness available");
		goto out;
	}
	keyhash_compute(secret, key, KEYHASH_KEY_LEN, hash);
	if (keys_insert(ctl, name, prefix, hash, &key_id) != CTL_OK ||
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
	int status, found, id;
	int64_t key_id;

	for (id = 0; id < OPT_COUNT; id++) {
		if (a->val[id])
			break;
	}
	if (id == OPT_COUNT) {
		status = ctl_usage(ctl->cmd, "nothing to change: give at least one option");
		goto out;
	}
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
	if (keys_models_exist(ctl, &o) != CTL_OK || keys_apply(ctl, key_id, name, &o) != CTL_OK ||
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
		{ "PREFIX", "prefix", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
		{ "REVOKED", "revoked_at", COL_TIME },
		{ "MODELS", "models", COL_LIST },
		{ "DEFAULT_MODEL", "default_model", COL_TEXT },
		{ "SERVICE_TIERS", "service_tiers", COL_CSV },
		{ "SERVER_TOOLS", "server_tools", COL_TEXT },
		{ "AUDIO", "audio", COL_TEXT },
		{ "CACHE_WRITES", "cache_writes", COL_TEXT },
		{ "RPM", "rpm", COL_INT },
		{ "TPM", "tpm", COL_INT },
		{ "MAX_CONC", "max_concurrent", COL_INT },
		{ "BUDGET_USD", "budget_micros", COL_USD },
		{ "PERIOD", "budget_period", COL_TEXT },
	};

	/* The allow-list joined in byte order: SQLite has no string_agg before 3.44, nor
	 * PostgreSQL group_concat. */
#define KEY_LIST_SQL(MODELS)                                                            \
	"SELECT k.id, k.name, k.prefix, k.created_at, k.revoked_at, " MODELS ","         \
	" k.default_model, k.service_tiers, k.server_tools, k.audio, k.cache_writes,"     \
	" k.rpm, k.tpm, k.max_concurrent, k.budget_micros, k.budget_period"               \
	" FROM keys k ORDER BY k.id"
	static const struct ctl_sql q = {
		KEY_LIST_SQL("(SELECT group_concat(model, ',') FROM"
		             " (SELECT model FROM key_models WHERE key_id = k.id ORDER BY model))"),
		KEY_LIST_SQL("(SELECT string_agg(model, ',' ORDER BY model COLLATE \"C\")"
		             " FROM key_models WHERE key_id = k.id)"),
	};
#undef KEY_LIST_SQL

	return ctl_print_table(ctl, q, NULL, cols, (int)(sizeof(cols) / sizeof(cols[0])),
	                       ctl_list_printer(a));
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
