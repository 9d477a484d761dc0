/* keyhash: gateway API keys and their keyed hashes, plus the per-installation secret
 * file. Used by tallyctl (key creation) and the agent (key look-up). Every function
 * is thread-safe: none keeps state.
 *
 * A key is "tly_" followed by 43 base64url characters (32 random bytes, no padding).
 * The database stores only HMAC-SHA256(secret, key) and the key's first 12 characters.
 * The 32-byte secret lives in a file beside the database (default: DB path + ".secret"),
 * mode 0600, created by whichever of tallyctl or the agent needs it first. */
#ifndef TALLY_KEYHASH_H
#define TALLY_KEYHASH_H

#include <stddef.h>

#define KEYHASH_SECRET_LEN 32
#define KEYHASH_LEN        32          /* HMAC-SHA256 digest */
#define KEYHASH_KEY_TAG    "tly_"
#define KEYHASH_KEY_LEN    47          /* "tly_" + 43 characters, no terminator */
#define KEYHASH_PREFIX_LEN 12

/* Writes a new random key and its terminator into out (cap > KEYHASH_KEY_LEN).
 * Returns 0, or -1 if cap is too small or getrandom() fails. */
int keyhash_generate(char *out, size_t cap);

/* 1 if key[0..len) has the shape of a gateway key (tag, length, charset), else 0.
 * A cheap pre-filter: a well-formed key still has to be found by its hash. */
int keyhash_key_valid(const char *key, size_t len);

/* Copies the display prefix (the first KEYHASH_PREFIX_LEN characters) of a
 * NUL-terminated key into out (cap > KEYHASH_PREFIX_LEN). 0, or -1 if either is short. */
int keyhash_prefix(const char *key, char *out, size_t cap);

/* out = HMAC-SHA256(secret, key[0..len)). */
void keyhash_compute(const unsigned char secret[KEYHASH_SECRET_LEN], const char *key,
                     size_t len, unsigned char out[KEYHASH_LEN]);

/* 1 if the two KEYHASH_LEN-byte digests are equal, else 0; constant time. */
int keyhash_equal(const unsigned char *a, const unsigned char *b);

/* Writes db_path + ".secret" into out. 0, or -1 if it does not fit. */
int keyhash_secret_path_default(const char *db_path, char *out, size_t cap);

/* The secret's path: configured when given (not NULL nor empty), else the default
 * beside db_path. 0, or -1 if it does not fit in out. */
int keyhash_secret_path(const char *configured, const char *db_path, char *out, size_t cap);

/* Reads the secret at path into out. With create set, a missing file is created
 * atomically (written and synced under a temporary name, then linked into place, so it
 * never replaces an existing file); a racing creator that loses reads the winner's
 * file. A symlink, a file that is not a regular file, is not owned by the effective
 * uid, is not exactly KEYHASH_SECRET_LEN bytes, or grants any permission to group or
 * others is refused. 0, or -1 with a message. */
int keyhash_secret_load(const char *path, int create, unsigned char out[KEYHASH_SECRET_LEN],
                        char *err, size_t errlen);

#endif
