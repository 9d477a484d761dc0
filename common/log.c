/* log: leveled lines to stderr with a UTC timestamp. Called from any thread: the level
 * is atomic and each line is formatted on the stack and written with one write(2). */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 4096

static atomic_int log_threshold = LOG_INFO;

static const char *const log_names[] = { "ERROR", "WARN", "INFO", "DEBUG" };

void log_set_level(enum log_level level)
{
	atomic_store_explicit(&log_threshold, (int)level, memory_order_relaxed);
}

int log_level_parse(const char *s, enum log_level *out)
{
	static const struct { const char *name; enum log_level level; } table[] = {
		{ "error", LOG_ERROR }, { "warn", LOG_WARN }, { "warning", LOG_WARN },
		{ "info", LOG_INFO },   { "debug", LOG_DEBUG },
	};
	size_t i;

	for (i = 0; s && i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcasecmp(s, table[i].name) == 0) {
			*out = table[i].level;
			return 0;
		}
	}
	return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	int saved_errno = errno;
	struct timespec ts;
	struct tm tm;
	size_t n, cap;
	va_list ap;
	int m;

	if ((int)level > atomic_load_explicit(&log_threshold, memory_order_relaxed))
		return;
	if ((int)level < LOG_ERROR || level > LOG_DEBUG)
		level = LOG_ERROR;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ %-5s ",
	                      ts.tv_nsec / 1000000, log_names[level]);

	/* One byte stays free for the newline. */
	cap = sizeof(line) - n - 1;
	va_start(ap, fmt);
	m = vsnprintf(line + n, cap, fmt, ap);
	va_end(ap);
	if (m < 0) {
		m = 0;
	} else if ((size_t)m >= cap) {
		n += cap - 1;
		line[n - 3] = line[n - 2] = line[n - 1] = '.';
		m = 0;
	}
	n += (size_t)m;
	if (line[n - 1] == '\n')
		n--;
	line[n++] = '\n';

	while (write(STDERR_FILENO, line, n) < 0 && errno == EINTR)
		;
	errno = saved_errno;
}
