/* keytable: builds the immutable configuration snapshot from SQLite (main thread) and
 * answers key and model look-ups on it (I/O threads, lock-free, read only). */
#include "keytable.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acct.h"
#include "db.h"
#include "price.h"
#include "tier.h"

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
	}
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

static char *keytable_col_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *s = sqlite3_column_text(st, col);

	return s ? strdup((const char *)s) : NULL;
}

typedef int (*keytable_row_fn)(struct keytable *t, sqlite3_stmt *st);

/* Calls fn on every row of sql, at most max_rows of them (more is an error: the array
 * being filled has no room); fn returns 0, or -1 to stop with an error. */
static int keytable_each_row(sqlite3 *db, struct keytable *t, const char *sql, size_t max_rows,
                             keytable_row_fn fn)
{
	sqlite3_stmt *st = NULL;
	size_t rows = 0;
	int rc, ret = -1;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (rows++ == max_rows || fn(t, st) < 0)
			goto out;
	if (rc == SQLITE_DONE)
		ret = 0;
out:
	sqlite3_finalize(st);
	return ret;
}

/* Allocates an array for as many elements as count_sql counts, stored in *n (plus one,
 * so that an empty table still gets a valid pointer); rows are then appended by the
 * row functions. Counting and reading share one read transaction, and each_row is
 * bounded by *n all the same. NULL on error. */
static void *keytable_alloc(sqlite3 *db, const char *count_sql, size_t elem, size_t *n_out)
{
	sqlite3_stmt *st = NULL;
	int64_t n = -1;

	if (sqlite3_prepare_v2(db, count_sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (n < 0 || (uint64_t)n > UINT32_MAX / 4)
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

static int keytable_add_provider(struct keytable *t, sqlite3_stmt *st)
{
	struct kt_provider *p = &t->providers[t->nproviders++];
	const unsigned char *api = sqlite3_column_text(st, 1);

	p->id = sqlite3_column_int64(st, 0);
	p->backend = keytable_col_strdup(st, 2);
	p->name = keytable_col_strdup(st, 3);
	p->api = api && strcmp((const char *)api, "anthropic") == 0 ? KT_API_ANTHROPIC
	                                                            : KT_API_OPENAI;
	return p->backend && p->name ? 0 : -1;
}

static int keytable_add_model(struct keytable *t, sqlite3_stmt *st)
{
	struct kt_model *m = &t->models[t->nmodels++];

	m->name = keytable_col_strdup(st, 0);
	m->provider = keytable_provider_by_id(t, sqlite3_column_int64(st, 1));
	m->created_at = sqlite3_column_int64(st, 2);
	return m->name ? 0 : -1;
}

/* Prices above 2^40 micro-dollars (a million dollars per Mtok) are no price: beyond
 * them the arithmetic of price.c could overflow. */
#define KEYTABLE_PRICE_MAX (1LL << 40)

/* One rate card, appended to its model's sheet (rows come sorted as the sheet is). A
 * tier no provider could report is skipped: it could never be picked. */
static int keytable_add_card(struct keytable *t, sqlite3_stmt *st)
{
	const char *name = (const char *)sqlite3_column_text(st, 0);
	const char *tier = (const char *)sqlite3_column_text(st, 1);
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
	c->above_tokens = sqlite3_column_int64(st, 2);
	for (i = 0; i < PRICE_CLASSES; i++) {
		sqlite3_int64 v = sqlite3_column_int64(st, 3 + i);

		c->micros[i] = sqlite3_column_type(st, 3 + i) == SQLITE_NULL || v < 0 ||
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
	if (p && strcmp(p, "total") == 0)
		return QUOTA_PERIOD_TOTAL;
	return QUOTA_PERIOD_MONTH;
}

static int keytable_add_key(struct keytable *t, sqlite3_stmt *st)
{
	struct kt_key *k = &t->keys[t->nkeys];
	const unsigned char *def = sqlite3_column_text(st, 4);

	if (sqlite3_column_bytes(st, 3) != KEYHASH_LEN)
		return 0;   /* not a hash this version makes; it could never match */
	t->nkeys++;
	k->id = sqlite3_column_int64(st, 0);
	k->name = keytable_col_strdup(st, 1);
	k->prefix = keytable_col_strdup(st, 2);
	memcpy(k->hash, sqlite3_column_blob(st, 3), KEYHASH_LEN);
	k->default_model = def ? keytable_find_model(t, (const char *)def, strlen((const char *)def))
	                       : NULL;
	k->revoked = sqlite3_column_int(st, 5);
	/* NULL reads as 0: no such limit. */
	k->quota.rpm = sqlite3_column_int64(st, 6);
	k->quota.tpm = sqlite3_column_int64(st, 7);
	k->quota.max_concurrent = sqlite3_column_int64(st, 8);
	k->quota.budget_micros = sqlite3_column_int64(st, 9);
	k->quota.period = keytable_period_of((const char *)sqlite3_column_text(st, 10));
	k->service_tiers = keytable_col_strdup(st, 11);
	k->server_tools = keytable_policy_of((const char *)sqlite3_column_text(st, 12));
	k->audio = keytable_policy_of((const char *)sqlite3_column_text(st, 13));
	if (sqlite3_column_type(st, 11) != SQLITE_NULL && !k->service_tiers)
		return -1;
	return k->name && k->prefix ? 0 : -1;
}

static struct kt_key *keytable_key_by_id(struct keytable *t, int64_t id)
{
	size_t lo = 0, hi = t->nkeys;

	/* keys are loaded ORDER BY id */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->keys[mid].id == id)
			return &t->keys[mid];
		if (t->keys[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int keytable_add_allowed(struct keytable *t, sqlite3_stmt *st)
{
	struct kt_key *k = keytable_key_by_id(t, sqlite3_column_int64(st, 0));
	const char *name = (const char *)sqlite3_column_text(st, 1);
	const struct kt_model *m;
	const struct kt_model **grown;

	if (!k)
		return 0;
	/* A listed model that no longer exists still makes the key restricted:
	 * an allow-list must never widen into "every model". */
	k->restricted = 1;
	m = name ? keytable_find_model(t, name, strlen(name)) : NULL;
	if (!m)
		return 0;
	grown = realloc(k->allowed, (k->nallowed + 1) * sizeof(*k->allowed));
	if (!grown)
		return -1;
	k->allowed = grown;
	k->allowed[k->nallowed++] = m;
	return 0;
}

/* Every model's rate cards, in price_sheet order. */
static int keytable_load_cards(sqlite3 *db, struct keytable *t)
{
	char sql[768];
	size_t off;
	int i;

	off = (size_t)snprintf(sql, sizeof(sql), "SELECT m.name, p.tier, p.above_tokens");
	for (i = 0; i < PRICE_CLASSES; i++)
		off += (size_t)snprintf(sql + off, sizeof(sql) - off, ", p.%s", pricecard_columns[i]);
	snprintf(sql + off, sizeof(sql) - off,
	         " FROM model_prices p JOIN models m ON m.id = p.model_id"
	         " ORDER BY m.name COLLATE BINARY, p.tier COLLATE BINARY, p.above_tokens");
	return keytable_each_row(db, t, sql, SIZE_MAX, keytable_add_card);
}

/* Providers before models before keys: each refers to the ones loaded before it.
 * BINARY collation orders model names like memcmp, which keytable_find_model needs. */
static int keytable_load_rows(sqlite3 *db, struct keytable *t)
{
	size_t n;

	if (!(t->providers = keytable_alloc(db, "SELECT count(*) FROM providers",
	                                    sizeof(*t->providers), &n)) ||
	    keytable_each_row(db, t, "SELECT id, api, backend, name FROM providers ORDER BY id", n,
	                      keytable_add_provider) < 0)
		return -1;
	if (!(t->models = keytable_alloc(db, "SELECT count(*) FROM models", sizeof(*t->models), &n)) ||
	    keytable_each_row(db, t,
	                      "SELECT name, provider_id, created_at FROM models"
	                      " ORDER BY name COLLATE BINARY",
	                      n, keytable_add_model) < 0 ||
	    keytable_load_cards(db, t) < 0)
		return -1;
	if (!(t->keys = keytable_alloc(db, "SELECT count(*) FROM keys", sizeof(*t->keys), &n)) ||
	    keytable_each_row(db, t,
	                      "SELECT id, name, prefix, hash, default_model,"
	                      " revoked_at IS NOT NULL, rpm, tpm, max_concurrent, budget_micros,"
	                      " budget_period, service_tiers, server_tools, audio"
	                      " FROM keys ORDER BY id",
	                      n, keytable_add_key) < 0)
		return -1;
	return keytable_each_row(db, t, "SELECT key_id, model FROM key_models ORDER BY key_id",
	                         SIZE_MAX, keytable_add_allowed);
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

int keytable_load(sqlite3 *db, const unsigned char secret[KEYHASH_SECRET_LEN],
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
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		goto out;
	in_txn = 1;
	t->generation = db_config_generation(db);
	if (t->generation < 0 || keytable_load_rows(db, t) < 0 || keytable_index_keys(t) < 0)
		goto out;
	ret = 0;
	*out = t;
	t = NULL;
out:
	if (ret < 0)
		snprintf(err, errlen, "loading keys and models: %s", sqlite3_errmsg(db));
	if (in_txn)
		sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
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

const struct kt_model *keytable_find_model(const struct keytable *t, const char *name, size_t len)
{
	size_t lo = 0, hi = t->nmodels;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *mn = t->models[mid].name;
		size_t mlen = strlen(mn);
		int c = memcmp(mn, name, mlen < len ? mlen : len);

		if (c == 0)
			c = mlen < len ? -1 : mlen > len;
		if (c == 0)
			return &t->models[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int keytable_key_allows(const struct kt_key *k, const struct kt_model *m)
{
	size_t i;

	if (!k->restricted)
		return 1;
	for (i = 0; i < k->nallowed; i++)
		if (k->allowed[i] == m)
			return 1;
	return 0;
}
