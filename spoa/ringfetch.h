/* ringfetch: the events an HAProxy ring holds, read over HAProxy's CLI ("show events
 * <ring>" on a stats socket of level operator or admin). HAProxy 3.x's ring forwarder
 * does not send what it buffered while its TCP peer was away (it reconnects only on a
 * new event, and then sends only later ones), so the intake asks the ring itself for
 * what it missed (intake.c). Runs on the calling thread and blocks it, bounded by a
 * timeout; the intake thread calls it. */
#ifndef TALLY_RINGFETCH_H
#define TALLY_RINGFETCH_H

#include <stddef.h>

/* Lines longer than this (a record is at most HAProxy's log "len", 8192 here) are
 * skipped whole. */
#define RINGFETCH_LINE_MAX 65536

/* Receives one event line, without its newline; line is borrowed for the call. */
typedef void ringfetch_line_fn(void *arg, const char *line, size_t len);

/* Connects to the unix socket at path, sends "show events <ring>" and calls cb for each
 * non-empty line of the answer, in order, until HAProxy closes the connection. ring:
 * 1 to 64 characters of [A-Za-z0-9_.-]. timeout_ms bounds the whole exchange. Returns
 * the number of lines passed to cb; RINGFETCH_ABSENT when no HAProxy is there (no socket
 * file, or nothing listening on it: HAProxy has not started, and so holds no ring); or
 * -1 with a message in err (lines already passed stay passed). */
#define RINGFETCH_ABSENT (-2)
long ringfetch_events(const char *path, const char *ring, int timeout_ms, ringfetch_line_fn *cb,
                      void *arg, char *err, size_t errlen);

/* The line splitting, on its own (pure): feeds buf[0..len) as the next bytes of the
 * answer. *held is the length of the unfinished line kept at the start of buf by the
 * previous call (0 at first); *skipping is 1 while a too-long line is being skipped.
 * Returns how many bytes of buf to keep (an unfinished line, moved to its start) and
 * adds the lines passed to cb to *lines. */
size_t ringfetch_split(char *buf, size_t len, int *skipping, ringfetch_line_fn *cb, void *arg,
                       long *lines);

#endif
