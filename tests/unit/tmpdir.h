/* A private temporary directory per test binary, removed with its files at the end.
 * Header-only (static inline) so that each test binary stays one file. */
#ifndef TALLY_TEST_TMPDIR_H
#define TALLY_TEST_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir_path[64];

static inline int tmpdir_make(const char *tag)
{
	snprintf(tmpdir_path, sizeof(tmpdir_path), "/tmp/tally-test-%s-XXXXXX", tag);
	if (!mkdtemp(tmpdir_path)) {
		perror("mkdtemp");
		return -1;
	}
	return 0;
}

/* Path of name inside the directory; the result lives until the next call. */
static inline const char *tmpdir_file(const char *name)
{
	static char buf[512];

	snprintf(buf, sizeof(buf), "%s/%s", tmpdir_path, name);
	return buf;
}

/* Removes the directory's plain files and the directory itself. */
static inline void tmpdir_remove(void)
{
	DIR *d = opendir(tmpdir_path);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			unlink(tmpdir_file(e->d_name));
	if (d)
		closedir(d);
	rmdir(tmpdir_path);
}

#endif
