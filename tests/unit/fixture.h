/* Test fixture shared by the keytable, decision and session tests: a fresh store
 * (teststore.h: a SQLite database in a temporary directory, or PostgreSQL) with two
 * providers, three models and keys of every kind, loaded into a keytable.
 * Header-only so that each test binary stays one file. */
#ifndef TALLY_TEST_FIXTURE_H
#define TALLY_TEST_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db.h"
#include "keyhash.h"
#include "keytable.h"
#include "teststore.h"
#include "tmpdir.h"

#define FIX_KEY_OPEN       "tly_open0000000000000000000000000000000000000"
#define FIX_KEY_RESTRICTED "tly_restricted00000000000000000000000000000000"
#define FIX_KEY_REVOKED    "tly_revoked000000000000000000000000000000000000"
#define FIX_KEY_NODEFAULT  "tly_nodefault0000000000000000000000000000000000"
#define FIX_KEY_STALE      "tly_stale00000000000000000000000000000000000000"

struct fixture {
	struct db *db;
	unsigned char secret[KEYHASH_SECRET_LEN];
	struct keytable *kt;
};

static int fixture_add_key(struct fixture *f, int id, const char *name, const char *key,
                           const char *default_model, int revoked)
{
	unsigned char hash[KEYHASH_LEN];
	struct db_stmt *st;
	enum db_status rc;

	keyhash_compute(f->secret, key, strlen(key), hash);
	if (db_prepare(f->db, "INSERT INTO keys (id, name, prefix, hash, default_model,"
	                      " created_at, revoked_at) VALUES (?, ?, ?, ?, ?, 1, ?)", &st) < 0)
		return -1;
	db_bind_int(st, 1, id);
	db_bind_text(st, 2, name, strlen(name));
	db_bind_text(st, 3, key, KEYHASH_PREFIX_LEN);
	db_bind_blob(st, 4, hash, KEYHASH_LEN);
	if (default_model)
		db_bind_text(st, 5, default_model, strlen(default_model));
	if (revoked)
		db_bind_int(st, 6, 2);
	rc = db_step(st);
	db_finalize(st);
	return rc == DB_DONE ? 0 : -1;
}

static int fixture_reload(struct fixture *f)
{
	char err[256];

	if (f->kt)
		keytable_unref(f->kt);
	f->kt = NULL;
	if (keytable_load(f->db, f->secret, &f->kt, err, sizeof(err)) < 0) {
		fprintf(stderr, "fixture: %s\n", err);
		return -1;
	}
	return 0;
}

static int fixture_open_on(struct fixture *f, enum teststore which)
{
	const char *store;
	char err[256] = "";

	memset(f, 0, sizeof(*f));
	memset(f->secret, 0x5a, sizeof(f->secret));
	if (tmpdir_make("fixture") < 0 || !(store = teststore_fresh(which, "t.db")))
		return -1;
	if (db_open(store, DB_CREATE, &f->db, err, sizeof(err)) < 0) {
		fprintf(stderr, "fixture: %s\n", err);
		return -1;
	}
	if (db_exec(f->db,
	            "INSERT INTO providers (id, name, api, backend, created_at) VALUES"
	            " (1, 'oai', 'openai', 'be_oai', 1), (2, 'ant', 'anthropic', 'be_ant', 1);"
	            "INSERT INTO models (id, name, provider_id, created_at, updated_at) VALUES"
	            " (1, 'gpt-a', 1, 1, 1), (2, 'gpt-b', 1, 1, 1), (3, 'claude-a', 2, 1, 1);"
	            "INSERT INTO model_prices (model_id, tier, above_tokens, input_micros_per_mtok,"
	            " output_micros_per_mtok) VALUES (1, 'default', 0, 100, 200),"
	            " (2, 'default', 0, 0, 0), (3, 'default', 0, 300, 400);",
	            err, sizeof(err)) < 0 ||
	    fixture_add_key(f, 1, "open", FIX_KEY_OPEN, "gpt-a", 0) < 0 ||
	    fixture_add_key(f, 2, "restricted", FIX_KEY_RESTRICTED, "gpt-b", 0) < 0 ||
	    fixture_add_key(f, 3, "revoked", FIX_KEY_REVOKED, NULL, 1) < 0 ||
	    fixture_add_key(f, 4, "nodefault", FIX_KEY_NODEFAULT, NULL, 0) < 0 ||
	    fixture_add_key(f, 5, "stale", FIX_KEY_STALE, NULL, 0) < 0 ||
	    db_exec(f->db,
	            "INSERT INTO key_models VALUES (2, 'gpt-b'), (2, 'claude-a'),"
	            " (5, 'deleted-model');",
	            err, sizeof(err)) < 0) {
		fprintf(stderr, "fixture: %s %s\n", err, db_errmsg(f->db));
		return -1;
	}
	return fixture_reload(f);
}

static inline int fixture_open(struct fixture *f)
{
	return fixture_open_on(f, TESTSTORE_SQLITE);
}

static void fixture_close(struct fixture *f)
{
	keytable_unref(f->kt);
	db_close(f->db);
	tmpdir_remove();
}

#endif
