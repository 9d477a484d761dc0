/* keyhash: key generation (getrandom), HMAC-SHA256 and constant-time comparison
 * (OpenSSL libcrypto), and the secret file. Stateless; safe from any thread. */
#include "keyhash.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define KEYHASH_RANDOM_LEN 32
#define KEYHASH_BODY_LEN   43          /* base64 of 32 bytes without its '=' */

_Static_assert(KEYHASH_KEY_LEN == sizeof(KEYHASH_KEY_TAG) - 1 + KEYHASH_BODY_LEN,
               "key length must match tag + base64url body");

static int keyhash_random(unsigned char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = getrandom(buf + got, len - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		got += (size_t)n;
	}
	return 0;
}

int keyhash_generate(char *out, size_t cap)
{
	unsigned char raw[KEYHASH_RANDOM_LEN];
	unsigned char b64[4 * ((KEYHASH_RANDOM_LEN + 2) / 3) + 1];
	const size_t tag_len = sizeof(KEYHASH_KEY_TAG) - 1;
	int rc = -1;
	size_t i;

	if (!out || cap <= KEYHASH_KEY_LEN)
		return -1;
	if (keyhash_random(raw, sizeof(raw)) < 0)
		goto out;
	EVP_EncodeBlock(b64, raw, (int)sizeof(raw));
	memcpy(out, KEYHASH_KEY_TAG, tag_len);
	/* base64 -> base64url: same alphabet except the last two symbols. */
	for (i = 0; i < KEYHASH_BODY_LEN; i++) {
		char c = (char)b64[i];

		out[tag_len + i] = c == '+' ? '-' : c == '/' ? '_' : c;
	}
	out[KEYHASH_KEY_LEN] = '\0';
	rc = 0;
out:
	OPENSSL_cleanse(raw, sizeof(raw));
	OPENSSL_cleanse(b64, sizeof(b64));
	return rc;
}

int keyhash_key_valid(const char *key, size_t len)
{
	const size_t tag_len = sizeof(KEYHASH_KEY_TAG) - 1;
	size_t i;

	if (!key || len != KEYHASH_KEY_LEN || memcmp(key, KEYHASH_KEY_TAG, tag_len) != 0)
		return 0;
	for (i = tag_len; i < len; i++) {
		char c = key[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return 0;
	}
	return 1;
}

int keyhash_prefix(const char *key, char *out, size_t cap)
{
	if (!key || !out || cap <= KEYHASH_PREFIX_LEN || strnlen(key, KEYHASH_PREFIX_LEN) < KEYHASH_PREFIX_LEN)
		return -1;
	memcpy(out, key, KEYHASH_PREFIX_LEN);
	out[KEYHASH_PREFIX_LEN] = '\0';
	return 0;
}

void keyhash_compute(const unsigned char secret[KEYHASH_SECRET_LEN], const char *key,
                     size_t len, unsigned char out[KEYHASH_LEN])
{
	unsigned int outlen = KEYHASH_LEN;

	/* Failure is not expected from libcrypto here; an all-zero digest matches no
	 * stored key, so the caller simply finds nothing. */
	if (!HMAC(EVP_sha256(), secret, KEYHASH_SECRET_LEN,
	          (const unsigned char *)(key ? key : ""), key ? len : 0, out, &outlen))
		memset(out, 0, KEYHASH_LEN);
}

int keyhash_equal(const unsigned char *a, const unsigned char *b)
{
	return CRYPTO_memcmp(a, b, KEYHASH_LEN) == 0;
}

int keyhash_secret_path_default(const char *db_path, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s.secret", db_path);

	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int keyhash_secret_path(const char *configured, const char *db_path, char *out, size_t cap)
{
	int n;

	if (!configured || !configured[0])
		return keyhash_secret_path_default(db_path, out, cap);
	n = snprintf(out, cap, "%s", configured);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Reads and validates an existing secret file. Returns 0, 1 if it does not exist,
 * or -1 with a message. Neither a symlink nor another user's file is taken: whoever
 * could change either could choose the secret (and so forge key hashes). */
static int keyhash_secret_read(const char *path, unsigned char out[KEYHASH_SECRET_LEN],
                               char *err, size_t errlen)
{
	struct stat st;
	size_t got = 0;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		if (errno == ELOOP)
			snprintf(err, errlen, "secret file %s is a symbolic link; give the file's "
			         "own path", path);
		else
			snprintf(err, errlen, "cannot open secret file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot stat secret file %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "secret file %s is not a regular file", path);
		goto out;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen, "secret file %s is owned by uid %u, not by this user (uid %u)",
		         path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen, "secret file %s is accessible by group or others (mode %03o); "
		         "it must be mode 0600", path, (unsigned)(st.st_mode & 0777));
		goto out;
	}
	if (st.st_size != KEYHASH_SECRET_LEN) {
		snprintf(err, errlen, "secret file %s has %lld bytes, expected %d", path,
		         (long long)st.st_size, KEYHASH_SECRET_LEN);
		goto out;
	}
	while (got < KEYHASH_SECRET_LEN) {
		ssize_t n = read(fd, out + got, KEYHASH_SECRET_LEN - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(err, errlen, "cannot read secret file %s: %s", path,
			         n < 0 ? strerror(errno) : "file shrank while reading");
			goto out;
		}
		got += (size_t)n;
	}
	rc = 0;
out:
	close(fd);
	if (rc < 0)
		OPENSSL_cleanse(out, KEYHASH_SECRET_LEN);
	return rc;
}

/* Makes the new directory entry durable. Best effort: some file systems refuse to
 * fsync a directory, and the file itself is already complete. */
static void keyhash_sync_dir(const char *path)
{
	char copy[PATH_MAX];
	int fd;

	if (snprintf(copy, sizeof(copy), "%s", path) >= (int)sizeof(copy))
		return;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Writes a fresh secret under a unique temporary name, syncs it, then links it to
 * path. link() never replaces an existing file, so when two processes race exactly
 * one secret wins and the loser's temporary file is simply removed. */
static int keyhash_secret_create(const char *path, char *err, size_t errlen)
{
	unsigned char secret[KEYHASH_SECRET_LEN];
	char tmp[PATH_MAX];
	size_t done = 0;
	int fd = -1, rc = -1;

	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "secret file path too long: %s", path);
		return -1;
	}
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot create secret file next to %s: %s", path, strerror(errno));
		return -1;
	}
	if (fchmod(fd, 0600) < 0 || keyhash_random(secret, sizeof(secret)) < 0) {
		snprintf(err, errlen, "cannot create secret file %s: %s", path, strerror(errno));
		goto out;
	}
	while (done < sizeof(secret)) {
		ssize_t n = write(fd, secret + done, sizeof(secret) - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "cannot write secret file %s: %s", tmp, strerror(errno));
			goto out;
		}
		done += (size_t)n;
	}
	if (fsync(fd) < 0) {
		snprintf(err, errlen, "cannot sync secret file %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (link(tmp, path) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create secret file %s: %s", path, strerror(errno));
		goto out;
	}
	keyhash_sync_dir(path);
	rc = 0;
out:
	OPENSSL_cleanse(secret, sizeof(secret));
	close(fd);
	unlink(tmp);
	return rc;
}

int keyhash_secret_load(const char *path, int create, unsigned char out[KEYHASH_SECRET_LEN],
                        char *err, size_t errlen)
{
	int rc = keyhash_secret_read(path, out, err, errlen);

	if (rc != 1)
		return rc;
	if (!create) {
		snprintf(err, errlen, "secret file %s does not exist", path);
		return -1;
	}
	if (keyhash_secret_create(path, err, errlen) < 0)
		return -1;
	/* Winner or loser of a creation race, everyone reads the file that is in place. */
	rc = keyhash_secret_read(path, out, err, errlen);
	if (rc == 1) {
		snprintf(err, errlen, "secret file %s vanished after creation", path);
		return -1;
	}
	return rc;
}
