/* token: reading the operator token file and judging its mode (see token.h). Main
 * thread. */
#include "token.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int token_read_file(const char *path, char *buf, size_t cap, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f) {
		snprintf(err, errlen, "--token-file %s: %s", path, strerror(errno));
		return -1;
	}
	n = fread(buf, 1, cap - 1, f);
	/* A file that fills buf exactly is too long only if a byte follows. */
	if (ferror(f) || (n == cap - 1 && fgetc(f) != EOF)) {
		snprintf(err, errlen, "--token-file %s: %s", path,
		         ferror(f) ? "read error" : "longer than 4 KB");
		fclose(f);
		return -1;
	}
	fclose(f);
	buf[n] = '\0';
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (n && buf[n - 1] == '\r')
		buf[--n] = '\0';
	if (n == 0 || strlen(buf) != n) {
		snprintf(err, errlen, "--token-file %s: empty, or holds a NUL byte", path);
		return -1;
	}
	return 0;
}

int token_file_private(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(err, errlen, "--token-file %s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "--token-file %s: not a regular file", path);
		return -1;
	}
	if (st.st_mode & 007) {
		snprintf(err, errlen, "--token-file %s: open to others (mode %03o; whoever reads it "
		         "has operator access): chmod 600 it", path, (unsigned)(st.st_mode & 0777));
		return -1;
	}
	if (st.st_mode & 020) {
		snprintf(err, errlen, "--token-file %s: writable by its group (mode %03o): chmod 600 "
		         "it", path, (unsigned)(st.st_mode & 0777));
		return -1;
	}
	return 0;
}
