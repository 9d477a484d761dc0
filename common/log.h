/* log: tiny leveled logger to stderr, shared by every binary. Thread-safe: any thread
 * may log; each line reaches stderr in one write(2) so lines never interleave.
 *
 * The level names are not syslog.h's: that header defines LOG_INFO and LOG_DEBUG as
 * macros, so a file must not include both. */
#ifndef TALLY_LOG_H
#define TALLY_LOG_H

#if defined(LOG_INFO) || defined(LOG_DEBUG)
#error "log.h clashes with syslog.h (LOG_INFO/LOG_DEBUG macros): include only one"
#endif

enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Messages above level are dropped. The default is LOG_INFO. */
void log_set_level(enum log_level level);

/* Parses "error", "warn" (or "warning"), "info", "debug", any case. 0 or -1. */
int log_level_parse(const char *s, enum log_level *out);

/* Writes "2024-05-01T12:00:00.123Z LEVEL message\n". Lines longer than about 4 KB
 * are truncated and end with "...". A trailing newline in fmt is not needed. */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
