/* spill: rows waiting on disk for the store (see spill.h). Pushed by the intake thread,
 * the main thread at start and the writer; read and removed by the writer only.
 *
 * An entry is the row's two journal epochs (u32 each), when it was spilled (i64 unix
 * ms; all little endian), then the row as a journal entry (journal_entry_encode): the
 * codec and its checks are the journal's, so a spilled row carries every field a
 * replayed one does. Rows are appended at write_off and read from read_off; the file is
 * truncated to zero when read_off reaches write_off, so it is as long as the rows
 * spilled since the store last caught up, and max_bytes bounds exactly that. */
#include "spill.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "journal.h"
#include "log.h"
#include "stats.h"

#define SPILL_PREFIX 16             /* epochs and spill time before the journal entry */
#define SPILL_CHUNK (256 * 1024)    /* bytes read at a time; far above one entry */
#define SPILL_LOG_EVERY_MS 5000     /* I/O errors are logged at most this often */

_Static_assert(SPILL_CHUNK > 4 * (SPILL_PREFIX + JOURNAL_ENTRY_MAX), "SPILL_CHUNK");

struct spill {
	pthread_mutex_t lock;          /* guards everything below */
	int fd;
	int64_t max_bytes;
	int64_t read_off, write_off;   /* the rows waiting are [read_off, write_off) */
	size_t rows;
	int64_t next_off;              /* read_off after the last spill_read's rows */
	size_t next_rows;              /* how many rows that spill_read returned */
	int64_t logged_ms;             /* when an I/O error was last logged */
	unsigned char chunk[SPILL_CHUNK];
};

static int64_t spill_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void spill_put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t spill_get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Counted always, logged at most every SPILL_LOG_EVERY_MS (an outage would otherwise
 * log every row). Called with the lock held. */
static void spill_error(struct spill *s, const char *what, int err)
{
	int64_t now = spill_now_ms();

	stats_add(&stats.errors[STATS_ERR_JOURNAL], 1);
	if (now - s->logged_ms >= SPILL_LOG_EVERY_MS) {
		s->logged_ms = now;
		log_error("spill: %s%s%s", what, err ? ": " : "", err ? strerror(err) : "");
	}
}

/* The gauges, after a change of the head or the count. Lock held. */
static void spill_gauges(struct spill *s, int64_t head_ms)
{
	atomic_store_explicit(&stats.spilled_rows, (int64_t)s->rows, memory_order_relaxed);
	atomic_store_explicit(&stats.spill_head_ms, s->rows ? head_ms : 0, memory_order_relaxed);
}

/* Back to an empty file. Lock held. */
static void spill_reset(struct spill *s)
{
	if (ftruncate(s->fd, 0) < 0)
		spill_error(s, "cannot truncate the file", errno);
	s->read_off = s->write_off = s->next_off = 0;
	s->rows = s->next_rows = 0;
	spill_gauges(s, 0);
}

struct spill *spill_open(const char *dir, int64_t max_bytes, char *err, size_t errlen)
{
	struct spill *s = calloc(1, sizeof(*s));
	char path[4096];

	if (!s) {
		snprintf(err, errlen, "spill: out of memory");
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/spill", dir);
	s->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (s->fd < 0) {
		snprintf(err, errlen, "spill: cannot open %s: %s", path, strerror(errno));
		free(s);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	s->max_bytes = max_bytes;
	spill_gauges(s, 0);
	return s;
}

void spill_close(struct spill *s)
{
	if (!s)
		return;
	close(s->fd);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int spill_push(struct spill *s, const struct acct_row *row)
{
	unsigned char buf[SPILL_PREFIX + JOURNAL_ENTRY_MAX];
	int64_t now = spill_now_ms();
	size_t n = journal_entry_encode(JOURNAL_ROW, row, buf + SPILL_PREFIX, JOURNAL_ENTRY_MAX);
	ssize_t w;
	int ret = -1;

	if (n == 0)
		return -1;   /* an enum out of range: the journal could not hold it either */
	n += SPILL_PREFIX;
	spill_put_u32(buf, row->journal_epoch[0]);
	spill_put_u32(buf + 4, row->journal_epoch[1]);
	spill_put_u32(buf + 8, (uint32_t)now);
	spill_put_u32(buf + 12, (uint32_t)((uint64_t)now >> 32));
	pthread_mutex_lock(&s->lock);
	if (s->write_off + (int64_t)n > s->max_bytes)
		goto out;
	w = pwrite(s->fd, buf, n, s->write_off);
	if (w != (ssize_t)n) {
		spill_error(s, "cannot write a row", w < 0 ? errno : ENOSPC);
		/* A part written stays beyond write_off: the next push overwrites it. */
		goto out;
	}
	s->write_off += (int64_t)n;
	if (s->rows++ == 0)
		spill_gauges(s, now);
	else
		atomic_store_explicit(&stats.spilled_rows, (int64_t)s->rows, memory_order_relaxed);
	ret = 0;
out:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

/* The spill time of the entry at p (SPILL_PREFIX bytes). */
static int64_t spill_entry_ms(const unsigned char *p)
{
	return (int64_t)((uint64_t)spill_get_u32(p + 8) | (uint64_t)spill_get_u32(p + 12) << 32);
}

size_t spill_read(struct spill *s, struct acct_row *out, size_t max)
{
	enum journal_kind k;
	int64_t off;
	size_t got = 0, len = 0, pos = 0, used;
	const char *failed = NULL;   /* why the rows cannot be read back */
	int failed_errno = 0;
	ssize_t r;
	int rc = 0, refilled = 0;

	pthread_mutex_lock(&s->lock);
	s->next_rows = 0;
	off = s->read_off;
	while (!failed && got < max && got < s->rows) {
		if (pos + SPILL_PREFIX + JOURNAL_ENTRY_HDR > len ||
		    (rc = journal_entry_decode(s->chunk + pos + SPILL_PREFIX, len - pos - SPILL_PREFIX,
		                               &k, &out[got], &used)) == 0) {
			/* The next entry is not all in the chunk: read on from it (once: a
			 * whole chunk holds any entry). */
			if (refilled) {
				failed = "a damaged entry";
				continue;
			}
			refilled = 1;
			off += (int64_t)pos;
			len = (size_t)(s->write_off - off < SPILL_CHUNK ? s->write_off - off : SPILL_CHUNK);
			r = pread(s->fd, s->chunk, len, off);
			pos = 0;
			if (r != (ssize_t)len) {
				failed = "cannot read the file";
				failed_errno = r < 0 ? errno : EIO;
			}
			continue;
		}
		if (rc < 0 || k != JOURNAL_ROW) {
			failed = "a damaged entry";
			continue;
		}
		refilled = 0;
		out[got].journal_epoch[0] = spill_get_u32(s->chunk + pos);
		out[got].journal_epoch[1] = spill_get_u32(s->chunk + pos + 4);
		pos += SPILL_PREFIX + used;
		got++;
	}
	if (failed) {
		/* Only damage on disk or an I/O error does this. The rows stay in the journal,
		 * which replays them at the next start; here they are forgotten, so that the
		 * writer goes on with the rows to come rather than retry a file it cannot read. */
		spill_error(s, failed, failed_errno);
		spill_reset(s);
		got = 0;
	} else {
		s->next_off = off + (int64_t)pos;
		s->next_rows = got;
	}
	pthread_mutex_unlock(&s->lock);
	return got;
}

void spill_advance(struct spill *s)
{
	unsigned char prefix[SPILL_PREFIX];

	pthread_mutex_lock(&s->lock);
	s->read_off = s->next_off;
	s->rows -= s->next_rows;
	s->next_rows = 0;
	if (s->rows == 0)
		spill_reset(s);
	else if (pread(s->fd, prefix, sizeof(prefix), s->read_off) == (ssize_t)sizeof(prefix))
		spill_gauges(s, spill_entry_ms(prefix));
	else
		spill_gauges(s, spill_now_ms());   /* unknown: say it is recent rather than 0 */
	pthread_mutex_unlock(&s->lock);
}

size_t spill_rows(struct spill *s)
{
	size_t n;

	pthread_mutex_lock(&s->lock);
	n = s->rows;
	pthread_mutex_unlock(&s->lock);
	return n;
}
