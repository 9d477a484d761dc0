/* keytable: builds the immutable configuration snapshot from the store (main thread at
 * start, then the reload thread) and answers key and model look-ups on it (I/O threads,
 * lock-free, read only). */
#include "keytable.h"

#include <openssl/crypto.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "enduser.h"
#include "join.h"
#include "db.h"
#include "price.h"
#include "tier.h"
#include "tz.h"

static void keytable_free(struct keytable *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->nproviders; i++) {
		free(t->providers[i].backend);
		free(t->providers[i].name);
	}
	for (i = 0; i < t->nmodels; i++) {
		free(t->models[i].name);
		free(t->models[i].prices.cards);
	}
	for (i = 0; i < t->nkeys; i++) {
		free(t->keys[i].name);
		free(t->keys[i].service_tiers);
		free(t->keys[i].prefix);
		free(t->keys[i].allowed);
		free(t->keys[i].own_allowed);
		free(t->keys[i].fixed_tags);
	}
	for (i = 0; i < t->nteams; i++) {
		free(t->teams[i].name);
		free(t->teams[i].allowed);
		free(t->teams[i].tags);
	}
	for (i = 0; i < t->nend_user_limits; i++)
		free(t->end_user_limits[i].end_user);
	free(t->end_user_limits);
	for (i = 0; i < t->nmodel_budgets; i++)
		free(t->model_budgets[i].model);
	free(t->model_budgets);
	free(t->teams);
	free(t->tag_budgets);
	free(t->providers);
	free(t->models);
	free(t->keys);
	free(t->slots);
	OPENSSL_cleanse(t->secret, sizeof(t->secret));
	free(t);
}

void keytable_ref(struct keytable *t, int n)
{
	atomic_fetch_add(&t->refs, n);
}

void keytable_unref(struct keytable *t)
{
	if (t && atomic_fetch_sub(&t->refs, 1) == 1)
		keytable_free(t);
}

static char *keytable_col_strdup(struct db_stmt *st, int col)
{
	const char *s = db_col_text(st, col);

	return s ? strdup(s) : NULL;
}

typedef int (*keytable_row_fn)(struct keytable *t, struct db_stmt *st);

/* Names in t->refused the row of sql's table that st is on, by its first column, for
 * the operator: a row written past tallyctl's checks (or by a newer tallyctl) stops
 * the whole load, and the error must say which. */
static void keytable_refuse(struct keytable *t, const char *sql, struct db_stmt *st)
{
	const char *from = strstr(sql, " FROM "), *col = db_col_name(st, 0);
	const char *v = db_col_text(st, 0);
	size_t n = from ? strcspn(from + 6, " ") : 0;
	char why[256];

	/* a row function may have said why first */
	snprintf(why, sizeof(why), "%.255s", t->refused);
	snprintf(t->refused, sizeof(t->refused), "a row of %.*s the agent cannot take (%.32s %.64s)%s%s",
	         (int)(n < 32 ? n : 32), from ? from + 6 : "", col ? col : "first column", v ? v : "NULL",
	         *why ? ": " : "", why);
}

/* Calls fn on every row of sql, at most max_rows of them (more is an error: the array
 * being filled has no room); fn returns 0, or -1 to stop with an error (the row named
 * in t->refused). */
static int keytable_each_row(struct db *db, struct keytable *t, const char *sql,
                             size_t max_rows, keytable_row_fn fn)
{
	struct db_stmt *st = NULL;
	size_t rows = 0;
	enum db_status rc;
	int ret = -1;

	if (db_prepare(db, sql, &st) < 0)
		return -1;
	while ((rc = db_step(st)) == DB_ROW)
		if (rows++ == max_rows || fn(t, st) < 0) {
			keytable_refuse(t, sql, st);
			goto out;
		}
	if (rc == DB_DONE)
		ret = 0;
out:
	db_finalize(st);
	return ret;
}

/* Allocates an array for as many elements as count_sql counts, stored in *n (plus one,
 * so that an empty table still gets a valid pointer); rows are then appended by the
 * row functions. Counting and reading share one read transaction, and each_row is
 * bounded by *n all the same. NULL on error. */
static void *keytable_alloc(struct db *db, const char *count_sql, size_t elem, size_t *n_out)
{
	int64_t n = -1;

	if (db_query_int(db, count_sql, &n) < 0 || n < 0 || (uint64_t)n > UINT32_MAX / 4)
		return NULL;
	*n_out = (size_t)n;
	return calloc((size_t)n + 1, elem);
}

static const struct kt_provider *keytable_provider_by_id(const struct keytable *t, int64_t id)
{
	size_t i;

	for (i = 0; i < t->nproviders; i++)
		if (t->providers[i].id == id)
			return &t->providers[i];
	return NULL;
}

static int keytable_add_provider(struct keytable *t, struct db_stmt *st)
{
	struct kt_provider *p = &t->providers[t->nproviders++];
	const char *api = db_col_text(st, 1);

	p->id = db_col_int(st, 0);
	p->backend = keytable_col_strdup(st, 2);
	p->name = keytable_col_strdup(st, 3);
	p->api = api && strcmp(api, "anthropic") == 0 ? KT_API_ANTHROPIC : KT_API_OPENAI;
	return p->backend && p->name ? 0 : -1;
}

static int keytable_add_model(struct keytable *t, struct db_stmt *st)
{
	struct kt_model *m = &t->models[t->nmodels++];

	m->name = keytable_col_strdup(st, 0);
	m->provider = keytable_provider_by_id(t, db_col_int(st, 1));
	m->created_at = db_col_int(st, 2);
	m->max_output = db_col_int(st, 3) > 0 ? db_col_int(st, 3) : 0;
	return m->name ? 0 : -1;
}

/* Prices above 2^40 micro-dollars (a million dollars per Mtok) are no price: beyond
 * them the arithmetic of price.c could overflow. */
#define KEYTABLE_PRICE_MAX (1LL << 40)

/* One rate card, appended to its model's sheet (rows come sorted as the sheet is). A
 * tier no provider could report is skipped: it could never be picked. */
static int keytable_add_card(struct keytable *t, struct db_stmt *st)
{
	const char *name = db_col_text(st, 0);
	const char *tier = db_col_text(st, 1);
	struct kt_model *m = name ? (struct kt_model *)keytable_find_model(t, name, strlen(name))
	                          : NULL;
	struct price_card *grown, *c;
	int i;

	if (!m || !tier || !tier_name_ok(tier, strlen(tier)))
		return 0;
	grown = realloc(m->prices.cards, (m->prices.ncards + 1) * sizeof(*grown));
	if (!grown)
		return -1;
	m->prices.cards = grown;
	c = &grown[m->prices.ncards++];
	snprintf(c->tier, sizeof(c->tier), "%s", tier);
	c->above_tokens = db_col_int(st, 2);
	for (i = 0; i < PRICE_CLASSES; i++) {
		int64_t v = db_col_int(st, 3 + i);

		c->micros[i] = db_col_type(st, 3 + i) == DB_NULL || v < 0 ||
		               v > KEYTABLE_PRICE_MAX ? PRICE_UNSET : v;
	}
	return 0;
}

enum kt_policy keytable_policy_of(const char *name)
{
	if (!name)
		return KT_POLICY_INHERIT;
	if (strcmp(name, "priced") == 0)
		return KT_POLICY_PRICED;
	if (strcmp(name, "allow") == 0)
		return KT_POLICY_ALLOW;
	if (strcmp(name, "deny") == 0)
		return KT_POLICY_DENY;
	return KT_POLICY_INHERIT;
}

static enum quota_period keytable_period_of(const char *p)
{
	if (p && strcmp(p, "day") == 0)
		return QUOTA_PERIOD_DAY;
	if (p && strcmp(p, "week") == 0)
		return QUOTA_PERIOD_WEEK;
	if (p && strcmp(p, "total") == 0)
		return QUOTA_PERIOD_TOTAL;
	return QUOTA_PERIOD_MONTH;
}

/* A key's or team's limits from columns first.. of st (rpm, tpm, max_concurrent, budget_micros,
 * budget_period), as keys and teams store them. */
static void keytable_quota_of(struct db_stmt *st, int first, struct quota_cfg *q)
{
	/* NULL reads as 0: no such limit. */
	q->rpm = db_col_int(st, first);
	q->tpm = db_col_int(st, first + 1);
	q->max_concurrent = db_col_int(st, first + 2);
	q->budget_micros = db_col_int(st, first + 3);
	q->period = keytable_period_of(db_col_text(st, first + 4));
}

/* The zone of a key's or team's budget periods from column col of st (budget_tz): NULL
 * for UTC; -1 for a zone this node cannot read (tallyctl checked it where it ran: a node
 * whose tzdata lacks it must not count the budget in another zone). */
static int keytable_tz_of(struct keytable *t, struct db_stmt *st, int col, struct quota_cfg *q)
{
	const char *name = db_col_text(st, col);

	q->tz = NULL;
	return !name || (q->tz = tz_get(name, t->refused, sizeof(t->refused))) ? 0 : -1;
}

/* Fixed tags from column col of st (keys.tags, teams.tags) into *out: NULL for none;
 * -1 for text that is not a set of tags (tallyctl writes none) or out of memory. */
static int keytable_tags_of(struct db_stmt *st, int col, struct tags **out)
{
	const char *s = db_col_text(st, col);
	struct tags t;

	*out = NULL;
	if (!s || !*s)
		return 0;
	if (tags_parse(s, strlen(s), &t) != TAGS_OK || !(*out = malloc(sizeof(t))))
		return -1;
	**out = t;
	return 0;
}

static int keytable_add_team(struct keytable *t, struct db_stmt *st)
{
	struct kt_team *m = &t->teams[t->nteams++];

	m->id = db_col_int(st, 0);
	m->name = keytable_col_strdup(st, 1);
	keytable_quota_of(st, 2, &m->quota);
	m->members_see_usage = db_col_int(st, 7) != 0;
	/* Teams' limits are counted under ids of their own (quota_team_subject). */
	if (m->id <= 0 || m->id >= QUOTA_TAG_SUBJECTS)
		return -1;
	return m->name && keytable_tags_of(st, 8, &m->tags) == 0 &&
	       keytable_tz_of(t, st, 9, &m->quota) == 0 ? 0 : -1;
}

static int keytable_add_tag_budget(struct keytable *t, struct db_stmt *st)
{
	struct kt_tag_budget *b = &t->tag_budgets[t->ntag_budgets++];
	const char *tag = db_col_text(st, 1);

	b->id = db_col_int(st, 0);
	if (!tag || !tags_tag_ok(tag, strlen(tag)) || b->id <= 0 ||
	    b->id >= QUOTA_KEY_MODEL_SUBJECTS - QUOTA_TAG_SUBJECTS)
		return -1;
	snprintf(b->tag, sizeof(b->tag), "%s", tag);
	b->quota.budget_micros = db_col_int(st, 2);
	b->quota.period = keytable_period_of(db_col_text(st, 3));
	return 0;
}

static int keytable_add_end_user_limit(struct keytable *t, struct db_stmt *st)
{
	struct kt_end_user_limit *l = &t->end_user_limits[t->nend_user_limits++];
	const char *user = db_col_text(st, 3);

	l->key_id = db_col_int(st, 1);
	l->team_id = db_col_int(st, 2);
	/* tallyctl writes only ids the agent would take (enduser_id_ok), or "". */
	if (!user || (*user && !enduser_id_ok(user, strlen(user))) ||
	    !(l->end_user = strdup(user)))
		return -1;
	l->quota.rpm = db_col_int(st, 4);
	l->quota.tpm = db_col_int(st, 5);
	l->quota.budget_micros = db_col_int(st, 6);
	l->quota.period = keytable_period_of(db_col_text(st, 7));
	return 0;
}

static int keytable_add_model_budget(struct keytable *t, struct db_stmt *st)
{
	struct kt_model_budget *b = &t->model_budgets[t->nmodel_budgets++];
	const char *model = db_col_text(st, 3);

	b->id = db_col_int(st, 0);
	b->key_id = db_col_int(st, 1);
	b->team_id = db_col_int(st, 2);
	/* tallyctl's longest model name: GET /tally/v1/usage fits an owner's budgets with
	 * names that long in one answer, and the quota state keeps the name (ENDUSER_ID_MAX). */
	if (!model || !*model || strlen(model) > ACCT_NAME_MAX || b->id <= 0 ||
	    b->id >= QUOTA_MODEL_SUBJECT_IDS || !(b->model = strdup(model)))
		return -1;
	b->quota.budget_micros = db_col_int(st, 4);
	b->quota.period = keytable_period_of(db_col_text(st, 5));
	return 0;
}

/* The index of id among n entries of stride bytes sorted by id (loaded ORDER BY id),
 * each beginning with its int64_t id (struct kt_key, struct kt_team); -1: none. */
static long keytable_index_of(const void *entries, size_t n, size_t stride, int64_t id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int64_t at;

		memcpy(&at, (const char *)entries + mid * stride, sizeof(at));
		if (at == id)
			return (long)mid;
		if (at < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

_Static_assert(offsetof(struct kt_key, id) == 0 && offsetof(struct kt_team, id) == 0,
               "keytable_index_of reads an entry's id at its start");

static struct kt_team *keytable_team_by_id(struct keytable *t, int64_t id)
{
	long i = keytable_index_of(t->teams, t->nteams, sizeof(*t->teams), id);

	return i < 0 ? NULL : &t->teams[i];
}

/* Appends m to an allow-list. */
static int keytable_list_add(const struct kt_model ***list, size_t *n, const struct kt_model *m)
{
	const struct kt_model **grown = realloc(*list, (*n + 1) * sizeof(**list));

	if (!grown)
		return -1;
	*list = grown;
	grown[(*n)++] = m;
	return 0;
}

static int keytable_add_team_model(struct keytable *t, struct db_stmt *st)
{
	struct kt_team *m = keytable_team_by_id(t, db_col_int(st, 0));
	const char *name = db_col_text(st, 1);
	const struct kt_model *model;

	if (!m)
		return 0;
	/* As a key's: a listed model that no longer exists still restricts the team. */
	m->restricted = 1;
	model = name ? keytable_find_model(t, name, strlen(name)) : NULL;
	return model ? keytable_list_add(&m->allowed, &m->nallowed, model) : 0;
}

/* keys.end_users; the schema's CHECK admits nothing else, and NULL reads as the default. */
static enum kt_end_users keytable_end_users_of(const char *s)
{
	return !s ? KT_END_USERS_OPTIONAL
	     : strcmp(s, "required") == 0 ? KT_END_USERS_REQUIRED
	     : strcmp(s, "forbidden") == 0 ? KT_END_USERS_FORBIDDEN : KT_END_USERS_OPTIONAL;
}

static int keytable_add_key(struct keytable *t, struct db_stmt *st)
{
	struct kt_key *k = &t->keys[t->nkeys];
	const char *def = db_col_text(st, 4);

	if (db_col_type(st, 3) != DB_BLOB || db_col_bytes(st, 3) != KEYHASH_LEN)
		return 0;   /* not a hash this version makes; it could never match */
	t->nkeys++;
	k->id = db_col_int(st, 0);
	k->name = keytable_col_strdup(st, 1);
	k->prefix = keytable_col_strdup(st, 2);
	memcpy(k->hash, db_col_blob(st, 3), KEYHASH_LEN);
	k->default_model = def ? keytable_find_model(t, def, strlen(def)) : NULL;
	k->revoked = db_col_int(st, 5) != 0;
	keytable_quota_of(st, 6, &k->quota);
	k->team = db_col_type(st, 15) == DB_NULL ? NULL : keytable_team_by_id(t, db_col_int(st, 15));
	k->service_tiers = keytable_col_strdup(st, 11);
	k->server_tools = keytable_policy_of(db_col_text(st, 12));
	k->audio = keytable_policy_of(db_col_text(st, 13));
	k->cache_writes = keytable_policy_of(db_col_text(st, 14));
	k->end_users = keytable_end_users_of(db_col_text(st, 16));
	if (db_col_type(st, 11) != DB_NULL && !k->service_tiers)
		return -1;
	if (keytable_tags_of(st, 17, &k->fixed_tags) < 0 || keytable_tz_of(t, st, 18, &k->quota) < 0)
		return -1;
	if (k->team && k->team->tags) {
		struct tags own = { 0 };

		if (k->fixed_tags)
			own = *k->fixed_tags;
		else if (!(k->fixed_tags = malloc(sizeof(*k->fixed_tags))))
			return -1;
		k->fixed_tags_over = tags_union(k->fixed_tags, &own, k->team->tags) != TAGS_OK;
	}
	return k->name && k->prefix ? 0 : -1;
}

const struct kt_key *keytable_key_of_id(const struct keytable *t, int64_t id)
{
	long i = keytable_index_of(t->keys, t->nkeys, sizeof(*t->keys), id);

	return i < 0 ? NULL : &t->keys[i];
}

static int keytable_add_allowed(struct keytable *t, struct db_stmt *st)
{
	/* The snapshot being built is ours to fill. */
	struct kt_key *k = (struct kt_key *)keytable_key_of_id(t, db_col_int(st, 0));
	const char *name = db_col_text(st, 1);
	const struct kt_model *m;

	if (!k)
		return 0;
	/* A listed model that no longer exists still makes the key restricted:
	 * an allow-list must never widen into "every model". */
	k->own_restricted = 1;
	m = name ? keytable_find_model(t, name, strlen(name)) : NULL;
	return m ? keytable_list_add(&k->own_allowed, &k->own_nallowed, m) : 0;
}

/* 1 if the list (restricted, allowed[0..n)) allows m. */
static int keytable_list_allows(int restricted, const struct kt_model *const *allowed,
                                size_t n, const struct kt_model *m)
{
	size_t i;

	if (!restricted)
		return 1;
	for (i = 0; i < n; i++)
		if (allowed[i] == m)
			return 1;
	return 0;
}

/* k's allow-list: its own narrowed by its team's (what both allow), in the order of
 * the narrower one's. */
static int keytable_narrow(struct kt_key *k)
{
	const struct kt_team *m = k->team;
	const struct kt_model *const *from = k->own_allowed;
	size_t i, n = k->own_nallowed;

	k->restricted = k->own_restricted || (m && m->restricted);
	if (!k->restricted)
		return 0;
	if (!k->own_restricted) {
		from = m->allowed;
		n = m->nallowed;
	}
	for (i = 0; i < n; i++)
		if ((!m || keytable_list_allows(m->restricted, m->allowed, m->nallowed, from[i])) &&
		    keytable_list_allows(k->own_restricted, k->own_allowed, k->own_nallowed, from[i]) &&
		    keytable_list_add(&k->allowed, &k->nallowed, from[i]) < 0)
			return -1;
	return 0;
}

/* Byte order (memcmp's), which keytable_find_model's search needs: SQLite calls that
 * collation BINARY, PostgreSQL "C". */
static const char *keytable_bytewise(struct db *db)
{
	return db_kind(db) == DB_POSTGRES ? "COLLATE \"C\"" : "COLLATE BINARY";
}

/* Every model's rate cards, in price_sheet order. */
static int keytable_load_cards(struct db *db, struct keytable *t)
{
	const char *bytewise = keytable_bytewise(db);
	char sql[768];
	size_t off;
	int i;

	off = (size_t)snprintf(sql, sizeof(sql), "SELECT m.name, p.tier, p.above_tokens");
	for (i = 0; i < PRICE_CLASSES; i++)
		off += (size_t)snprintf(sql + off, sizeof(sql) - off, ", p.%s", pricecard_columns[i]);
	snprintf(sql + off, sizeof(sql) - off,
	         " FROM model_prices p JOIN models m ON m.id = p.model_id"
	         " ORDER BY m.name %s, p.tier %s, p.above_tokens", bytewise, bytewise);
	return keytable_each_row(db, t, sql, SIZE_MAX, keytable_add_card);
}

/* End users' limits, in keytable_end_user_cmp's order, each key marked that it or its
 * team has some. */
static int keytable_load_end_user_limits(struct db *db, struct keytable *t)
{
	char sql[256];
	size_t n, i;

	/* The id first, which names a row the agent cannot take (keytable_refuse). */
	snprintf(sql, sizeof(sql), "SELECT id, coalesce(key_id, 0), coalesce(team_id, 0), end_user,"
	         " rpm, tpm, budget_micros, budget_period FROM end_user_limits"
	         " ORDER BY 2, 3, end_user %s", keytable_bytewise(db));
	if (!(t->end_user_limits = keytable_alloc(db, "SELECT count(*) FROM end_user_limits",
	                                          sizeof(*t->end_user_limits), &n)) ||
	    keytable_each_row(db, t, sql, n, keytable_add_end_user_limit) < 0)
		return -1;
	for (i = 0; i < t->nend_user_limits; i++) {
		const struct kt_end_user_limit *l = &t->end_user_limits[i];
		long k = keytable_index_of(t->keys, t->nkeys, sizeof(*t->keys), l->key_id);
		struct kt_team *m = keytable_team_by_id(t, l->team_id);
		unsigned budget = l->quota.budget_micros > 0 ? 1u << l->quota.period : 0;

		if (k >= 0) {
			t->keys[k].end_user_limited = 1;
			t->keys[k].end_user_budgets |= budget;
		}
		if (m) {
			m->end_user_limited = 1;
			m->end_user_budgets |= budget;
		}
	}
	for (i = 0; i < t->nkeys; i++) {
		struct kt_key *k = &t->keys[i];

		if (k->team) {
			k->end_user_limited |= k->team->end_user_limited;
			k->end_user_budgets |= k->team->end_user_budgets;
		}
	}
	return 0;
}

/* Budgets per model, each key's and team's a run of them (keytable_load_rows' order
 * groups them). */
static int keytable_load_model_budgets(struct db *db, struct keytable *t)
{
	char sql[256];
	size_t n, i;

	snprintf(sql, sizeof(sql), "SELECT id, coalesce(key_id, 0), coalesce(team_id, 0), model,"
	         " budget_micros, budget_period FROM model_budgets ORDER BY 2, 3, model %s",
	         keytable_bytewise(db));
	if (!(t->model_budgets = keytable_alloc(db, "SELECT count(*) FROM model_budgets",
	                                        sizeof(*t->model_budgets), &n)) ||
	    keytable_each_row(db, t, sql, n, keytable_add_model_budget) < 0)
		return -1;
	for (i = 0; i < t->nmodel_budgets; i++) {
		const struct kt_model_budget *b = &t->model_budgets[i];
		long k = keytable_index_of(t->keys, t->nkeys, sizeof(*t->keys), b->key_id);
		struct kt_team *m = keytable_team_by_id(t, b->team_id);

		if (k >= 0) {
			if (!t->keys[k].model_budgets)
				t->keys[k].model_budgets = b;
			t->keys[k].nmodel_budgets++;
		} else if (m) {
			if (!m->model_budgets)
				m->model_budgets = b;
			m->nmodel_budgets++;
		}
	}
	return 0;
}

/* Providers before models before teams before keys: each refers to the ones loaded
 * before it. */
static int keytable_load_rows(struct db *db, struct keytable *t)
{
	char models_sql[128], tags_sql[128];
	size_t n, i;

	snprintf(models_sql, sizeof(models_sql),
	         "SELECT name, provider_id, created_at, max_output FROM models ORDER BY name %s",
	         keytable_bytewise(db));
	if (!(t->providers = keytable_alloc(db, "SELECT count(*) FROM providers",
	                                    sizeof(*t->providers), &n)) ||
	    keytable_each_row(db, t, "SELECT id, api, backend, name FROM providers ORDER BY id", n,
	                      keytable_add_provider) < 0)
		return -1;
	if (!(t->models = keytable_alloc(db, "SELECT count(*) FROM models", sizeof(*t->models), &n)) ||
	    keytable_each_row(db, t, models_sql, n, keytable_add_model) < 0 ||
	    keytable_load_cards(db, t) < 0)
		return -1;
	if (!(t->teams = keytable_alloc(db, "SELECT count(*) FROM teams", sizeof(*t->teams), &n)) ||
	    keytable_each_row(db, t,
	                      "SELECT id, name, rpm, tpm, max_concurrent, budget_micros,"
	                      " budget_period, members_see_usage, tags, budget_tz FROM teams ORDER BY id", n,
	                      keytable_add_team) < 0 ||
	    keytable_each_row(db, t, "SELECT team_id, model FROM team_models ORDER BY team_id",
	                      SIZE_MAX, keytable_add_team_model) < 0)
		return -1;
	snprintf(tags_sql, sizeof(tags_sql), "SELECT id, tag, budget_micros, budget_period"
	         " FROM tag_budgets ORDER BY tag %s", keytable_bytewise(db));
	if (!(t->tag_budgets = keytable_alloc(db, "SELECT count(*) FROM tag_budgets",
	                                      sizeof(*t->tag_budgets), &n)) ||
	    keytable_each_row(db, t, tags_sql, n, keytable_add_tag_budget) < 0)
		return -1;
	if (!(t->keys = keytable_alloc(db, "SELECT count(*) FROM keys", sizeof(*t->keys), &n)) ||
	    keytable_each_row(db, t,
	                      "SELECT id, name, prefix, hash, default_model,"
	                      " CASE WHEN revoked_at IS NULL THEN 0 ELSE 1 END, rpm, tpm,"
	                      " max_concurrent, budget_micros, budget_period, service_tiers,"
	                      " server_tools, audio, cache_writes, team_id, end_users, tags, budget_tz"
	                      " FROM keys"
	                      " ORDER BY id",
	                      n, keytable_add_key) < 0 ||
	    keytable_each_row(db, t, "SELECT key_id, model FROM key_models ORDER BY key_id",
	                      SIZE_MAX, keytable_add_allowed) < 0)
		return -1;
	for (i = 0; i < t->nkeys; i++)
		if (keytable_narrow(&t->keys[i]) < 0)
			return -1;
	return keytable_load_end_user_limits(db, t) < 0 ? -1 : keytable_load_model_budgets(db, t);
}

static uint32_t keytable_slot_of(const unsigned char *hash)
{
	/* The hash is an HMAC output: its first bytes are already uniform. */
	return (uint32_t)hash[0] | (uint32_t)hash[1] << 8 | (uint32_t)hash[2] << 16 |
	       (uint32_t)hash[3] << 24;
}

static int keytable_index_keys(struct keytable *t)
{
	size_t i;

	t->nslots = 16;
	while (t->nslots < t->nkeys * 2)
		t->nslots <<= 1;
	t->slots = calloc(t->nslots, sizeof(*t->slots));
	if (!t->slots)
		return -1;
	for (i = 0; i < t->nkeys; i++) {
		size_t s = keytable_slot_of(t->keys[i].hash) & (t->nslots - 1);

		while (t->slots[s])
			s = (s + 1) & (t->nslots - 1);
		t->slots[s] = (uint32_t)(i + 1);
	}
	return 0;
}

/* One snapshot for every read, so the generation matches the rows. SQLite: a deferred
 * BEGIN (a reader: BEGIN IMMEDIATE, db_begin's, would queue behind the writer).
 * PostgreSQL: REPEATABLE READ, whose snapshot is taken at the first read; db_begin
 * also reconnects a connection the store lost. */
static int keytable_begin(struct db *db)
{
	char err[256];

	if (db_kind(db) == DB_SQLITE)
		return db_exec(db, "BEGIN", err, sizeof(err));
	if (db_begin(db) != DB_OK)
		return -1;
	if (db_exec(db, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", err,
	            sizeof(err)) < 0) {
		db_rollback(db);
		return -1;
	}
	return 0;
}

/* Ends keytable_begin's read; nothing was written. */
static void keytable_end(struct db *db)
{
	char err[256];

	if (db_kind(db) == DB_SQLITE)
		db_exec(db, "COMMIT", err, sizeof(err));
	else
		db_rollback(db);
}

/* Snapshots loaded by this process: the stamp of each one's limits. */
static atomic_llong keytable_loads;

/* Stamps every limit of t with the next load's number (quota_cfg.generation): it only
 * grows, where the store's generation may go back (a restored or failed-over
 * PostgreSQL), and quota states take the newest limits by it. */
static void keytable_stamp(struct keytable *t)
{
	int64_t stamp = (int64_t)atomic_fetch_add(&keytable_loads, 1) + 1;
	size_t i;

	for (i = 0; i < t->nkeys; i++)
		t->keys[i].quota.generation = stamp;
	for (i = 0; i < t->nteams; i++)
		t->teams[i].quota.generation = stamp;
	for (i = 0; i < t->ntag_budgets; i++)
		t->tag_budgets[i].quota.generation = stamp;
	for (i = 0; i < t->nend_user_limits; i++)
		t->end_user_limits[i].quota.generation = stamp;
	for (i = 0; i < t->nmodel_budgets; i++)
		t->model_budgets[i].quota.generation = stamp;
}

int keytable_load(struct db *db, const unsigned char secret[KEYHASH_SECRET_LEN],
                  struct keytable **out, char *err, size_t errlen)
{
	struct keytable *t = calloc(1, sizeof(*t));
	int in_txn = 0, ret = -1;

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	atomic_init(&t->refs, 1);
	memcpy(t->secret, secret, KEYHASH_SECRET_LEN);
	if (keytable_begin(db) < 0)
		goto out;
	in_txn = 1;
	t->generation = db_config_generation(db);
	if (t->generation < 0 || keytable_load_rows(db, t) < 0 || keytable_index_keys(t) < 0)
		goto out;
	keytable_stamp(t);
	ret = 0;
	*out = t;
	t = NULL;
out:
	if (ret < 0)
		snprintf(err, errlen, "loading keys and models: %s",
		         t && t->refused[0] ? t->refused : db_errmsg(db));
	if (in_txn)
		keytable_end(db);
	keytable_free(t);
	return ret;
}

const struct kt_key *keytable_find_key(const struct keytable *t, const char *key, size_t len)
{
	unsigned char hash[KEYHASH_LEN];
	size_t s;

	keyhash_compute(t->secret, key, len, hash);
	s = keytable_slot_of(hash) & (t->nslots - 1);
	while (t->slots[s]) {
		const struct kt_key *k = &t->keys[t->slots[s] - 1];

		if (keyhash_equal(k->hash, hash))
			return k;
		s = (s + 1) & (t->nslots - 1);
	}
	return NULL;
}

/* Bytewise order of have (NUL-terminated) against want (len bytes), as the store sorts
 * names with keytable_bytewise. */
static int keytable_name_cmp(const char *have, const char *want, size_t len)
{
	size_t hlen = strlen(have);
	int c = memcmp(have, want, hlen < len ? hlen : len);

	return c ? c : hlen < len ? -1 : hlen > len;
}

/* The index of the one of n names (name_of(arr, i), sorted by keytable_name_cmp) that is
 * want[0..len), or -1: models' and tag budgets' look-ups. */
static ptrdiff_t keytable_bsearch(const void *arr, size_t n,
                                  const char *(*name_of)(const void *arr, size_t i),
                                  const char *want, size_t len)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = keytable_name_cmp(name_of(arr, mid), want, len);

		if (c == 0)
			return (ptrdiff_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static const char *keytable_model_name(const void *arr, size_t i)
{
	return ((const struct kt_model *)arr)[i].name;
}

static const char *keytable_tag_budget_tag(const void *arr, size_t i)
{
	return ((const struct kt_tag_budget *)arr)[i].tag;
}

const struct kt_model *keytable_find_model(const struct keytable *t, const char *name, size_t len)
{
	ptrdiff_t i = keytable_bsearch(t->models, t->nmodels, keytable_model_name, name, len);

	return i < 0 ? NULL : &t->models[i];
}

/* 1 if a budget for model budgeted holds for model too: a dated snapshot of it, or its
 * alias NAME-latest. */
static int keytable_model_covers(const char *budgeted, const char *model)
{
	static const char alias[] = "-latest";
	size_t n = strlen(budgeted);

	return join_model_match(budgeted, model) == JOIN_MODEL_SNAPSHOT ||
	       (strncmp(model, budgeted, n) == 0 && strcmp(model + n, alias) == 0);
}

const struct kt_model_budget *keytable_model_budget(const struct kt_model_budget *b, size_t n,
                                                    const char *model)
{
	const struct kt_model_budget *covers = NULL;
	size_t i;

	for (i = 0; i < n; i++) {
		if (strcmp(b[i].model, model) == 0)
			return &b[i];
		/* The first name bytewise, whatever order b is in: spend.c reads an owner's
		 * budgets in the store's order. */
		if (keytable_model_covers(b[i].model, model) &&
		    (!covers || strcmp(b[i].model, covers->model) < 0))
			covers = &b[i];
	}
	return covers;
}

const struct kt_tag_budget *keytable_find_tag_budget(const struct keytable *t, const char *tag,
                                                    size_t len)
{
	ptrdiff_t i = keytable_bsearch(t->tag_budgets, t->ntag_budgets, keytable_tag_budget_tag,
	                               tag, len);

	return i < 0 ? NULL : &t->tag_budgets[i];
}

int keytable_key_allows(const struct kt_key *k, const struct kt_model *m)
{
	return keytable_list_allows(k->restricted, k->allowed, k->nallowed, m);
}

int keytable_key_own_allows(const struct kt_key *k, const struct kt_model *m)
{
	return keytable_list_allows(k->own_restricted, k->own_allowed, k->own_nallowed, m);
}

/* Order of end users' limits: key_id, team_id, then the end user bytewise. */
static int keytable_end_user_cmp(const struct kt_end_user_limit *l, int64_t key_id,
                                 int64_t team_id, const char *user, size_t len)
{
	if (l->key_id != key_id)
		return l->key_id < key_id ? -1 : 1;
	if (l->team_id != team_id)
		return l->team_id < team_id ? -1 : 1;
	return keytable_name_cmp(l->end_user, user, len);
}

static const struct kt_end_user_limit *keytable_end_user_row(const struct keytable *t,
                                                             int64_t key_id, int64_t team_id,
                                                             const char *user, size_t len)
{
	size_t lo = 0, hi = t->nend_user_limits;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = keytable_end_user_cmp(&t->end_user_limits[mid], key_id, team_id, user, len);

		if (c == 0)
			return &t->end_user_limits[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct quota_cfg *keytable_end_user_limits(const struct keytable *t,
                                                 const struct kt_key *k, const char *user,
                                                 size_t len)
{
	int64_t team = k->team ? k->team->id : 0;
	const struct kt_end_user_limit *l;

	if (!k->end_user_limited || len == 0)
		return NULL;
	if (!(l = keytable_end_user_row(t, k->id, 0, user, len)) &&
	    !(team && (l = keytable_end_user_row(t, 0, team, user, len))) &&
	    !(l = keytable_end_user_row(t, k->id, 0, "", 0)) && team)
		l = keytable_end_user_row(t, 0, team, "", 0);
	return l ? &l->quota : NULL;
}

int64_t keytable_end_user_subject(const struct keytable *t, int64_t key_id, const char *user,
                                  size_t len)
{
	/* "end-user", the key's id and the end user's, so that no other use of the secret
	 * (a key's hash) computes the same bytes. */
	char buf[32 + ACCT_END_USER_MAX];
	unsigned char mac[KEYHASH_LEN];
	uint64_t h = 0;
	int n = snprintf(buf, sizeof(buf), "end-user:%lld:", (long long)key_id);
	size_t i;

	if (len >= ACCT_END_USER_MAX)
		len = ACCT_END_USER_MAX - 1;
	memcpy(buf + n, user, len);
	keyhash_compute(t->secret, buf, (size_t)n + len, mac);
	for (i = 0; i < 8; i++)
		h = h << 8 | mac[i];
	return quota_end_user_subject(h);
}
