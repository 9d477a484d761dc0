/* The agent's in-memory configuration snapshot (keys, models, providers), loaded
 * from the store (db.h) by the main thread at start and the reload thread after
 * (reload.h), and read lock-free by the I/O threads.
 *
 * Life cycle: keytable_load() returns a snapshot holding one reference. The loading
 * thread hands a reference to each I/O thread through its inbox; a thread drops the
 * previous snapshot's reference when it switches. The last keytable_unref() frees. */
#ifndef TALLY_KEYTABLE_H
#define TALLY_KEYTABLE_H

#include "keytable-t.h"

struct db;

/* Builds a snapshot from db (any connection; reads in one transaction so the
 * generation matches the rows). Returns 0, or -1 with a message in err. */
int keytable_load(struct db *db, const unsigned char secret[KEYHASH_SECRET_LEN],
                  struct keytable **out, char *err, size_t errlen);

/* Looks up a presented gateway key (any bytes, any length) by its keyed hash, comparing
 * digests in constant time. Returns NULL when no key has that hash. The result is
 * borrowed from t and lives as long as the caller's reference to t. */
const struct kt_key *keytable_find_key(const struct keytable *t, const char *key, size_t len);

/* The key whose keys.id is id; NULL if none. Borrowed from t. */
const struct kt_key *keytable_key_of_id(const struct keytable *t, int64_t id);

/* Exact, case-sensitive model lookup; NULL if unknown. Borrowed from t. */
const struct kt_model *keytable_find_model(const struct keytable *t, const char *name, size_t len);

/* The budget among b[0..n) (a key's or a team's model_budgets, in any order) that a
 * request routed to model, or a row of that model, counts against: the one for that
 * name, else the first bytewise of those whose model it is a dated snapshot
 * (join_model_match) or the NAME-latest alias of; NULL: none. spend.c counts rows by the
 * same rule: a row counts where its request did, except a row of a dated snapshot whose
 * owner budgets the snapshot by name too (docs/limits.md, "Budgets per model"). */
const struct kt_model_budget *keytable_model_budget(const struct kt_model_budget *b, size_t n,
                                                    const char *model);

/* The budget of tag (len bytes, name=value); NULL: the tag has none. */
const struct kt_tag_budget *keytable_find_tag_budget(const struct keytable *t, const char *tag,
                                                    size_t len);

/* 1 if key k may use model m: its own allow-list and its team's both allow it (no
 * allow-list means every model). */
int keytable_key_allows(const struct kt_key *k, const struct kt_model *m);

/* The limits of end user user[0..len) of key k: k's row for that end user, else its
 * team's, else k's default, else its team's; NULL when none applies (no end user, or
 * no row). A row may carry no limit (quota_limited 0): that end user is exempt. */
const struct quota_cfg *keytable_end_user_limits(const struct keytable *t,
                                                 const struct kt_key *k, const char *user,
                                                 size_t len);

/* The quota subject of end user user[0..len) of key key_id (quota_end_user_subject):
 * keyed by the installation's secret, the same on every node. */
int64_t keytable_end_user_subject(const struct keytable *t, int64_t key_id, const char *user,
                                  size_t len);

/* 1 if k's own allow-list allows m, whatever its team's says: when k may not use m,
 * which of the two refused it. */
int keytable_key_own_allows(const struct kt_key *k, const struct kt_model *m);

void keytable_ref(struct keytable *t, int n);
void keytable_unref(struct keytable *t);

/* The policy a keys.server_tools, audio or cache_writes value names ("priced", "allow", "deny");
 * KT_POLICY_INHERIT for NULL or any other text. */
enum kt_policy keytable_policy_of(const char *name);

#endif
