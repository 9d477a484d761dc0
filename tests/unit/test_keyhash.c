/* Unit tests for common/keyhash.c: HMAC against RFC 4231, key shape and prefix,
 * constant-time comparison, and the secret file (creation, reload, refusals, and two
 * processes racing to create it). Single-threaded; forks for the race. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keyhash.h"
#include "tmpdir.h"
#include "unit.h"

static int test_write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	int ok;

	if (fd < 0)
		return -1;
	ok = write(fd, data, len) == (ssize_t)len && fchmod(fd, mode) == 0;
	close(fd);
	return ok ? 0 : -1;
}

static int test_hex_equal(const unsigned char *bin, const char *hex)
{
	char buf[2 * KEYHASH_LEN + 1];
	int i;

	for (i = 0; i < KEYHASH_LEN; i++)
		snprintf(buf + 2 * i, 3, "%02x", bin[i]);
	return strcmp(buf, hex) == 0;
}

/* RFC 4231 keys are shorter than 32 bytes. HMAC zero-pads every key shorter than the
 * block size (64), so the RFC key followed by zeros up to 32 bytes gives the same MAC. */
static void test_hmac_rfc4231(void)
{
	unsigned char secret[KEYHASH_SECRET_LEN] = { 0 }, out[KEYHASH_LEN];

	memset(secret, 0x0b, 20);
	keyhash_compute(secret, "Hi There", 8, out);
	CHECK(test_hex_equal(out, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));

	memset(secret, 0, sizeof(secret));
	memcpy(secret, "Jefe", 4);
	keyhash_compute(secret, "what do ya want for nothing?", 28, out);
	CHECK(test_hex_equal(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
}

static void test_generate_format(void)
{
	char key[KEYHASH_KEY_LEN + 1], small[KEYHASH_KEY_LEN];
	size_t i;

	CHECK_EQ_INT(keyhash_generate(key, sizeof(key)), 0);
	CHECK_EQ_INT(strlen(key), KEYHASH_KEY_LEN);
	CHECK_EQ_INT(strlen(key), 47);
	CHECK(strncmp(key, "tly_", 4) == 0);
	for (i = 4; i < strlen(key); i++)
		CHECK(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", key[i]));
	CHECK(keyhash_key_valid(key, strlen(key)));
	CHECK_EQ_INT(keyhash_generate(small, sizeof(small)), -1);
}

static void test_generate_differs(void)
{
	char a[KEYHASH_KEY_LEN + 1], b[KEYHASH_KEY_LEN + 1];

	CHECK_EQ_INT(keyhash_generate(a, sizeof(a)), 0);
	CHECK_EQ_INT(keyhash_generate(b, sizeof(b)), 0);
	CHECK(strcmp(a, b) != 0);
}

static void test_key_valid(void)
{
	const char *good = "tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA-";

	CHECK(keyhash_key_valid(good, strlen(good)));
	CHECK(!keyhash_key_valid(good, strlen(good) - 1));
	CHECK(!keyhash_key_valid("sk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 47));
	CHECK(!keyhash_key_valid("tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA+", 47));
	CHECK(!keyhash_key_valid("tly_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", 47));
	CHECK(!keyhash_key_valid(NULL, 0));
}

static void test_prefix(void)
{
	char key[KEYHASH_KEY_LEN + 1], prefix[KEYHASH_PREFIX_LEN + 1], small[KEYHASH_PREFIX_LEN];

	CHECK_EQ_INT(keyhash_generate(key, sizeof(key)), 0);
	CHECK_EQ_INT(keyhash_prefix(key, prefix, sizeof(prefix)), 0);
	CHECK_EQ_INT(strlen(prefix), 12);
	CHECK(strncmp(prefix, key, 12) == 0);
	CHECK_EQ_INT(keyhash_prefix(key, small, sizeof(small)), -1);
	CHECK_EQ_INT(keyhash_prefix("tly_short", prefix, sizeof(prefix)), -1);
}

static void test_equal(void)
{
	unsigned char a[KEYHASH_LEN], b[KEYHASH_LEN];
	unsigned char secret[KEYHASH_SECRET_LEN] = { 1 };

	keyhash_compute(secret, "tly_x", 5, a);
	keyhash_compute(secret, "tly_x", 5, b);
	CHECK(keyhash_equal(a, b));
	b[0] ^= 1;
	CHECK(!keyhash_equal(a, b));
	b[0] ^= 1;
	b[KEYHASH_LEN - 1] ^= 0x80;
	CHECK(!keyhash_equal(a, b));
	keyhash_compute(secret, "tly_y", 5, b);
	CHECK(!keyhash_equal(a, b));
}

static void test_secret_path_default(void)
{
	char out[64], small[8];

	CHECK_EQ_INT(keyhash_secret_path_default("data/tally.db", out, sizeof(out)), 0);
	CHECK_EQ_STR(out, "data/tally.db.secret");
	CHECK_EQ_INT(keyhash_secret_path_default("data/tally.db", small, sizeof(small)), -1);
}

static void test_secret_create_reload(void)
{
	unsigned char a[KEYHASH_SECRET_LEN], b[KEYHASH_SECRET_LEN], zero[KEYHASH_SECRET_LEN] = { 0 };
	const char *path = tmpdir_file("create.secret");
	char err[256] = "";
	struct stat st;

	CHECK_EQ_INT(keyhash_secret_load(path, 0, a, err, sizeof(err)), -1);
	CHECK(strstr(err, "does not exist") != NULL);
	CHECK(stat(path, &st) < 0);

	CHECK_EQ_INT(keyhash_secret_load(path, 1, a, err, sizeof(err)), 0);
	CHECK_EQ_INT(stat(path, &st), 0);
	CHECK_EQ_INT(st.st_size, KEYHASH_SECRET_LEN);
	CHECK_EQ_INT(st.st_mode & 0777, 0600);
	CHECK(memcmp(a, zero, sizeof(zero)) != 0);

	CHECK_EQ_INT(keyhash_secret_load(path, 1, b, err, sizeof(err)), 0);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 0, b, err, sizeof(err)), 0);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
}

static void test_secret_wrong_size(void)
{
	unsigned char out[KEYHASH_SECRET_LEN], data[KEYHASH_SECRET_LEN + 1] = { 7 };
	const char *path = tmpdir_file("short.secret");
	char err[256] = "";

	CHECK_EQ_INT(test_write_file(path, data, KEYHASH_SECRET_LEN - 1, 0600), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "31 bytes") != NULL);

	path = tmpdir_file("long.secret");
	CHECK_EQ_INT(test_write_file(path, data, sizeof(data), 0600), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "33 bytes") != NULL);

	path = tmpdir_file("empty.secret");
	CHECK_EQ_INT(test_write_file(path, data, 0, 0600), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "0 bytes") != NULL);
}

static void test_secret_bad_mode(void)
{
	unsigned char out[KEYHASH_SECRET_LEN], data[KEYHASH_SECRET_LEN] = { 7 };
	const char *path = tmpdir_file("open.secret");
	char err[256] = "";

	CHECK_EQ_INT(test_write_file(path, data, sizeof(data), 0640), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "group or others") != NULL);

	CHECK_EQ_INT(chmod(path, 0604), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 0, out, err, sizeof(err)), -1);

	CHECK_EQ_INT(chmod(path, 0600), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 0, out, err, sizeof(err)), 0);
	CHECK(memcmp(out, data, sizeof(data)) == 0);

	CHECK_EQ_INT(keyhash_secret_load(tmpdir_path, 0, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "not a regular file") != NULL);
}

/* A link to a valid secret, and a dangling one, are refused: whoever can write the
 * directory could otherwise point the gateway at a file of their choosing. */
static void test_secret_symlink(void)
{
	unsigned char out[KEYHASH_SECRET_LEN], data[KEYHASH_SECRET_LEN] = { 9 };
	char target[512], link_path[512], err[256] = "";
	struct stat st;

	/* tmpdir_file's buffer is reused by each call: keep copies */
	snprintf(target, sizeof(target), "%s", tmpdir_file("target.secret"));
	snprintf(link_path, sizeof(link_path), "%s", tmpdir_file("link.secret"));
	CHECK_EQ_INT(test_write_file(target, data, sizeof(data), 0600), 0);
	CHECK_EQ_INT(keyhash_secret_load(target, 0, out, err, sizeof(err)), 0);
	CHECK_EQ_INT(symlink(target, link_path), 0);
	CHECK_EQ_INT(keyhash_secret_load(link_path, 0, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "symbolic link") != NULL);
	CHECK_EQ_INT(keyhash_secret_load(link_path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "symbolic link") != NULL);

	snprintf(target, sizeof(target), "%s", tmpdir_file("nowhere.secret"));
	snprintf(link_path, sizeof(link_path), "%s", tmpdir_file("dangling.secret"));
	CHECK_EQ_INT(symlink(target, link_path), 0);
	CHECK_EQ_INT(keyhash_secret_load(link_path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "symbolic link") != NULL);
	CHECK(lstat(target, &st) < 0);   /* nothing created through the link */
}

/* A secret owned by another user is refused even when this process may read it (root
 * may read anything): that user could change it. Needs root to chown. */
static void test_secret_other_owner(void)
{
	unsigned char out[KEYHASH_SECRET_LEN], data[KEYHASH_SECRET_LEN] = { 5 };
	const char *path = tmpdir_file("foreign.secret");
	char err[256] = "";

	CHECK_EQ_INT(test_write_file(path, data, sizeof(data), 0600), 0);
	if (chown(path, 65534, 65534) < 0) {
		if (errno == EPERM) {
			printf("test_secret_other_owner: skipped, chown needs root (uid %u)\n",
			       (unsigned)geteuid());
			return;
		}
		CHECK(!"chown");
		return;
	}
	CHECK_EQ_INT(keyhash_secret_load(path, 1, out, err, sizeof(err)), -1);
	CHECK(strstr(err, "owned by uid 65534") != NULL);

	CHECK_EQ_INT(chown(path, geteuid(), getegid()), 0);
	CHECK_EQ_INT(keyhash_secret_load(path, 0, out, err, sizeof(err)), 0);
	CHECK(memcmp(out, data, sizeof(data)) == 0);
}

/* Child of the race: waits for the start signal, loads (creating) the secret and
 * sends what it got to the parent. */
static void test_race_child(int start_fd, int result_fd, const char *path)
{
	unsigned char secret[KEYHASH_SECRET_LEN];
	char err[256], c;
	int ok;

	ok = read(start_fd, &c, 1) == 0 &&
	     keyhash_secret_load(path, 1, secret, err, sizeof(err)) == 0 &&
	     write(result_fd, secret, sizeof(secret)) == (ssize_t)sizeof(secret);
	_exit(ok ? 0 : 1);
}

static int test_dir_entries(void)
{
	DIR *d = opendir(tmpdir_path);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void test_secret_race(void)
{
	int round;

	for (round = 0; round < 20; round++) {
		unsigned char got[2][KEYHASH_SECRET_LEN], file[KEYHASH_SECRET_LEN];
		char name[32], err[256];
		int start[2], result[2][2], i, status, before = test_dir_entries();
		pid_t pid[2];

		snprintf(name, sizeof(name), "race%d.secret", round);
		if (pipe(start) < 0 || pipe(result[0]) < 0 || pipe(result[1]) < 0) {
			CHECK(!"pipe");
			return;
		}
		for (i = 0; i < 2; i++) {
			pid[i] = fork();
			if (pid[i] == 0) {
				close(start[1]);
				test_race_child(start[0], result[i][1], tmpdir_file(name));
			}
			close(result[i][1]);
		}
		close(start[0]);
		close(start[1]);    /* EOF releases both children at once */
		for (i = 0; i < 2; i++) {
			CHECK(read(result[i][0], got[i], sizeof(got[i])) == (ssize_t)sizeof(got[i]));
			close(result[i][0]);
			CHECK(waitpid(pid[i], &status, 0) == pid[i]);
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		CHECK(memcmp(got[0], got[1], sizeof(got[0])) == 0);
		CHECK_EQ_INT(keyhash_secret_load(tmpdir_file(name), 0, file, err, sizeof(err)), 0);
		CHECK(memcmp(got[0], file, sizeof(file)) == 0);
		/* Exactly one new file: no temporary left behind. */
		CHECK_EQ_INT(test_dir_entries(), before + 1);
	}
}

int main(void)
{
	if (tmpdir_make("keyhash") < 0)
		return 1;
	RUN(test_hmac_rfc4231);
	RUN(test_generate_format);
	RUN(test_generate_differs);
	RUN(test_key_valid);
	RUN(test_prefix);
	RUN(test_equal);
	RUN(test_secret_path_default);
	RUN(test_secret_create_reload);
	RUN(test_secret_wrong_size);
	RUN(test_secret_bad_mode);
	RUN(test_secret_symlink);
	RUN(test_secret_other_owner);
	RUN(test_secret_race);
	tmpdir_remove();
	return UNIT_DONE();
}
