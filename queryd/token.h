/* token: the operator token file (--token-file): read as queryd uses it, and whether it
 * is private. The rules are queryd's own, not keyhash's for the key-hashing secret:
 * the token is a password the operator chose, and systemd's LoadCredential may hand
 * it over owned by root and readable by the service through an ACL (which shows as
 * group read permission). Main thread: at start (main.c) and for --self-check
 * (selfcheck.c). */
#ifndef QUERYD_TOKEN_H
#define QUERYD_TOKEN_H

#include <stddef.h>

/* Reads the token file at path into buf (one trailing newline, CRLF too, removed). An
 * empty token, a NUL byte or a file that does not fit buf is an error: the operator
 * meant to set one. 0, or -1 with err. */
int token_read_file(const char *path, char *buf, size_t cap, char *err, size_t errlen);

/* 0 if the file at path is a regular file that others cannot read or write and the
 * group cannot write; else -1 with err (which says how to fix it). */
int token_file_private(const char *path, char *err, size_t errlen);

#endif
