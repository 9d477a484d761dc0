/* journal: the segment files, their epochs and the entry codec (see journal.h).
 *
 * THREADS
 * Each producer thread owns a journal_log: a buffer and the segment file of one epoch,
 * "<runid>-<epoch>-<log>.j" in the journal directory. Nothing of a log is shared, so
 * appending takes no lock. The shared state is one atomic epoch number and a ring of
 * JOURNAL_EPOCHS atomic counters of unreleased entries, slot epoch % JOURNAL_EPOCHS,
 * incremented by appends and decremented by journal_release on any thread. Only the
 * main thread (journal_tick) advances the epoch and deletes files; it alone touches
 * oldest and retired[]. The names of the logs, which tick needs to find an epoch's
 * files, sit under a mutex.
 *
 * WHY DELETION IS SAFE
 * Epoch E's files may go once no entry of E is unreleased and no log can add one. An
 * append counts itself in E (increment), then re-reads the epoch and retries if it
 * moved; tick deletes E only after storing an epoch > E and then reading E's counter
 * as zero. All these accesses are seq_cst, so they fall in one total order S. Take an
 * append that settled on E: its increment I precedes its re-read R, which returned E,
 * so R precedes tick's store A of E + 1 in S (else R would see the newer epoch). Thus
 * I < A < Z, tick's read of zero: the increment was visible to Z, and Z saw zero only
 * because the entry had been released. Any later append re-reads after A and moves on.
 * Released but still buffered entries must not be lost either, nor their file be
 * created after the deletion: a non-empty log buffer therefore holds one count of its
 * own on its epoch (taken while its first entry's count is held, dropped after the
 * write), so E's counter stays non-zero until every log has written its entries of E.
 * A slot is reused only once the epoch it held was deleted: tick does not advance
 * into a slot still live, transient increments of a retrying append only delay a
 * deletion, never allow one.
 *
 * FORMAT (version 1)
 * A segment starts with "TJNL" and a u32 version, then entries: u16 payload length,
 * u8 kind, u32 FNV-1a of kind and payload, payload. The payload is the row's fields in
 * journal_fields order: strings as varint length and bytes, integers as zigzag
 * varints, enums as varints. A log writes its segment header with its first entries,
 * in the same write(). */
#include "journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"
#include "price.h"
#include "stats.h"

#define JOURNAL_VERSION 1
#define JOURNAL_SEG_HDR 8
#define JOURNAL_LOGS_MAX 32
#define JOURNAL_LOG_BUF (64 * 1024)   /* a batch larger than this takes more writes */
#define JOURNAL_WARN_NS (10 * 1000000000ull)
/* "<13 digits ms>-<pid>-<10 digits epoch>-<name>.j" */
#define JOURNAL_FILE_NAME_MAX (13 + 1 + 10 + 1 + 10 + 1 + JOURNAL_NAME_MAX + 2)

static const unsigned char journal_seg_hdr[JOURNAL_SEG_HDR] = {
	'T', 'J', 'N', 'L', JOURNAL_VERSION, 0, 0, 0
};

struct journal_name {
	char name[JOURNAL_NAME_MAX + 1];
	int open;
};

struct journal {
	_Alignas(64) _Atomic uint32_t epoch;           /* current epoch, >= 1 */
	_Alignas(64) atomic_int_fast64_t outstanding[JOURNAL_EPOCHS];
	char *dir;
	char runid[32];
	int lock_fd;
	int epoch_seconds;
	uint64_t epoch_started_ns;                     /* main thread */
	uint64_t stall_warned_ns;                      /* main thread */
	uint32_t oldest;                               /* main thread: first epoch not deleted */
	unsigned char retired[JOURNAL_EPOCHS];         /* main thread: deleted, > oldest */
	char **old;                                    /* earlier runs' file names, sorted */
	size_t nold;
	int damaged;                                   /* main thread */
	_Atomic uint64_t warn_last_ns;
	atomic_uint warn_suppressed;
	pthread_mutex_t names_lock;
	struct journal_name names[JOURNAL_LOGS_MAX];   /* under names_lock */
	int nnames;                                    /* under names_lock */
};

struct journal_log {
	struct journal *j;
	char name[JOURNAL_NAME_MAX + 1];
	uint32_t epoch;        /* of the buffered entries and of fd's file; 0: none yet */
	int fd;                /* -1: the epoch's file is not open yet */
	off_t size;            /* bytes of the file known to be whole entries */
	int broken;            /* a failed write left garbage that could not be cut off */
	size_t len;            /* entry bytes buffered after the header room */
	char path[PATH_MAX];
	unsigned char buf[JOURNAL_SEG_HDR + JOURNAL_LOG_BUF];
};

/* ---- entry codec ---- */

enum journal_ftype { JF_STR, JF_I64, JF_INT, JF_ENUM };

struct journal_field {
	unsigned char type;
	unsigned short off;
	unsigned short lim;    /* JF_STR: capacity with the NUL; JF_ENUM: value count */
};

#define JF_S(f) { JF_STR, offsetof(struct acct_row, f), sizeof(((struct acct_row *)0)->f) }
#define JF_N(t, f) { t, offsetof(struct acct_row, f), 0 }
#define JF_E(f, n) { JF_ENUM, offsetof(struct acct_row, f), n }

/* The payload, in order. Append only (an entry may end after JOURNAL_FIRST_FIELDS, all
 * the rest then reading as ACCT_NONE), with a new JOURNAL_VERSION otherwise. */
static const struct journal_field journal_fields[] = {
	JF_S(request_id), JF_N(JF_I64, key_id), JF_S(model), JF_S(model_requested),
	JF_S(provider), JF_S(verdict), JF_S(termination), JF_N(JF_INT, status),
	JF_N(JF_INT, stream), JF_N(JF_I64, prompt_tokens), JF_N(JF_I64, completion_tokens),
	JF_N(JF_I64, cached_tokens), JF_N(JF_I64, cache_creation_tokens),
	JF_N(JF_I64, reasoning_tokens), JF_N(JF_I64, cost_micros), JF_N(JF_INT, unpriced),
	JF_E(outcome, ACCT_OUTCOME_COUNT), JF_E(usage_source, ACCT_USAGE_SOURCE_COUNT),
	JF_N(JF_I64, started_at_ms), JF_N(JF_I64, duration_ms), JF_N(JF_I64, ttfb_ms),
	JF_N(JF_I64, bytes_in), JF_N(JF_I64, bytes_out),
	/* Appended: an entry written before them ends here, and they read as ACCT_NONE. */
	JF_N(JF_I64, estimated_tokens), JF_N(JF_I64, estimated_cost_micros),
	JF_N(JF_I64, est_prompt_tokens), JF_N(JF_I64, est_completion_tokens),
	/* Appended again: an entry may end before them too. */
	JF_E(flags, 16), JF_S(response_id),
	/* And the classes priced apart (docs/pricing.md). */
	JF_N(JF_I64, cache_creation_1h_tokens), JF_N(JF_I64, audio_input_tokens),
	JF_N(JF_I64, audio_output_tokens), JF_N(JF_I64, accepted_prediction_tokens),
	JF_N(JF_I64, rejected_prediction_tokens), JF_N(JF_I64, web_search_calls),
	JF_S(service_tier),
	/* And what the row's price stands on (docs/pricing.md). */
	JF_S(model_reported), JF_E(priced_fallback, PRICE_FALLBACK_TIER << 1),
	/* And the key's team. */
	JF_N(JF_I64, team_id),
	/* And the end user. */
	JF_S(end_user),
	/* And the tags. */
	JF_S(tags),
};

/* Where an entry may end: the fields of the first entries written (version 1 as first
 * released), of those written before the flags, before the priced classes, before the
 * reported model and fallbacks, before the team, before the end user, and before the
 * tags. */
#define JOURNAL_FIRST_FIELDS 23
#define JOURNAL_SECOND_FIELDS 27
#define JOURNAL_THIRD_FIELDS 29
#define JOURNAL_FOURTH_FIELDS 36
#define JOURNAL_FIFTH_FIELDS 38
#define JOURNAL_SIXTH_FIELDS 39
#define JOURNAL_SEVENTH_FIELDS 40

#define JOURNAL_NFIELDS (sizeof(journal_fields) / sizeof(journal_fields[0]))

_Static_assert(JOURNAL_NFIELDS == 11 + JOURNAL_INT_FIELDS, "JOURNAL_INT_FIELDS is stale");
_Static_assert(sizeof(enum acct_outcome) == sizeof(int) &&
               sizeof(enum acct_usage_source) == sizeof(int), "enums are read as int");
_Static_assert(JOURNAL_PAYLOAD_MAX <= UINT16_MAX, "payload length is a u16");

struct journal_writer {
	unsigned char *p;
	size_t len, cap;
};

struct journal_reader {
	const unsigned char *p, *end;
};

uint32_t journal_entry_checksum(unsigned char kind, const unsigned char *payload, size_t n)
{
	return hash_fnv1a32(hash_fnv1a32(HASH_FNV32_BASIS, &kind, 1), payload, n);
}

static int journal_put(struct journal_writer *w, const void *p, size_t n)
{
	if (w->cap - w->len < n)
		return -1;
	memcpy(w->p + w->len, p, n);
	w->len += n;
	return 0;
}

static int journal_put_varint(struct journal_writer *w, uint64_t v)
{
	unsigned char b[10];
	size_t n = 0;

	while (v >= 0x80) {
		b[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	b[n++] = (unsigned char)v;
	return journal_put(w, b, n);
}

static uint64_t journal_zigzag(int64_t v)
{
	return v < 0 ? ~((uint64_t)v << 1) : (uint64_t)v << 1;
}

static int64_t journal_unzigzag(uint64_t u)
{
	return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static int journal_put_field(struct journal_writer *w, const struct journal_field *f,
                             const struct acct_row *row)
{
	const char *base = (const char *)row + f->off;
	int64_t i64;
	int i;

	switch (f->type) {
	case JF_STR: {
		size_t n = strnlen(base, f->lim - 1);

		return journal_put_varint(w, n) < 0 ? -1 : journal_put(w, base, n);
	}
	case JF_I64:
		memcpy(&i64, base, sizeof(i64));
		return journal_put_varint(w, journal_zigzag(i64));
	case JF_INT:
		memcpy(&i, base, sizeof(i));
		return journal_put_varint(w, journal_zigzag(i));
	default:
		memcpy(&i, base, sizeof(i));
		if (i < 0 || i >= f->lim)
			return -1;
		return journal_put_varint(w, (uint64_t)i);
	}
}

size_t journal_entry_encode(enum journal_kind k, const struct acct_row *row,
                            unsigned char *buf, size_t cap)
{
	struct journal_writer w = { .p = buf, .len = JOURNAL_ENTRY_HDR, .cap = cap };
	size_t i, plen;
	uint32_t sum;

	if ((k != JOURNAL_DECISION && k != JOURNAL_ROW) || cap < JOURNAL_ENTRY_HDR)
		return 0;
	for (i = 0; i < JOURNAL_NFIELDS; i++)
		if (journal_put_field(&w, &journal_fields[i], row) < 0)
			return 0;
	plen = w.len - JOURNAL_ENTRY_HDR;
	sum = journal_entry_checksum((unsigned char)k, buf + JOURNAL_ENTRY_HDR, plen);
	buf[0] = (unsigned char)plen;
	buf[1] = (unsigned char)(plen >> 8);
	buf[2] = (unsigned char)k;
	buf[3] = (unsigned char)sum;
	buf[4] = (unsigned char)(sum >> 8);
	buf[5] = (unsigned char)(sum >> 16);
	buf[6] = (unsigned char)(sum >> 24);
	return w.len;
}

static int journal_get_varint(struct journal_reader *r, uint64_t *out)
{
	uint64_t v = 0;
	int shift;

	for (shift = 0; shift < 70 && r->p < r->end; shift += 7) {
		unsigned char b = *r->p++;

		if (shift == 63 && b > 1)
			return -1;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

static int journal_get_field(struct journal_reader *r, const struct journal_field *f,
                             struct acct_row *row)
{
	char *base = (char *)row + f->off;
	uint64_t u;
	int64_t i64;
	int i;

	if (journal_get_varint(r, &u) < 0)
		return -1;
	switch (f->type) {
	case JF_STR:
		/* A NUL inside would silently cut the string: only corruption puts one there. */
		if (u >= f->lim || u > (uint64_t)(r->end - r->p) || memchr(r->p, 0, u))
			return -1;
		memcpy(base, r->p, u);
		base[u] = '\0';
		r->p += u;
		return 0;
	case JF_I64:
		i64 = journal_unzigzag(u);
		memcpy(base, &i64, sizeof(i64));
		return 0;
	case JF_INT:
		i64 = journal_unzigzag(u);
		if (i64 < INT_MIN || i64 > INT_MAX)
			return -1;
		i = (int)i64;
		memcpy(base, &i, sizeof(i));
		return 0;
	default:
		if (u >= f->lim)
			return -1;
		i = (int)u;
		memcpy(base, &i, sizeof(i));
		return 0;
	}
}

/* Fields from the first-th on, of an entry written before they were appended. */
static void journal_absent(struct acct_row *row, size_t first)
{
	int64_t none = ACCT_NONE;
	int inone = ACCT_NONE;
	size_t i;

	for (i = first; i < JOURNAL_NFIELDS; i++) {
		char *base = (char *)row + journal_fields[i].off;

		if (journal_fields[i].type == JF_I64)
			memcpy(base, &none, sizeof(none));
		else if (journal_fields[i].type == JF_INT)
			memcpy(base, &inone, sizeof(inone));
	}
}

int journal_entry_decode(const unsigned char *p, size_t len, enum journal_kind *k,
                         struct acct_row *row, size_t *used)
{
	struct journal_reader r;
	size_t plen, i;
	uint32_t sum;

	if (len < JOURNAL_ENTRY_HDR)
		return 0;
	plen = (size_t)p[0] | (size_t)p[1] << 8;
	if (plen > JOURNAL_PAYLOAD_MAX || (p[2] != JOURNAL_DECISION && p[2] != JOURNAL_ROW))
		return -1;
	if (len - JOURNAL_ENTRY_HDR < plen)
		return 0;
	sum = (uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 24;
	if (journal_entry_checksum(p[2], p + JOURNAL_ENTRY_HDR, plen) != sum)
		return -1;
	memset(row, 0, sizeof(*row));
	r.p = p + JOURNAL_ENTRY_HDR;
	r.end = r.p + plen;
	for (i = 0; i < JOURNAL_NFIELDS; i++) {
		if ((i == JOURNAL_FIRST_FIELDS || i == JOURNAL_SECOND_FIELDS ||
		     i == JOURNAL_THIRD_FIELDS || i == JOURNAL_FOURTH_FIELDS ||
		     i == JOURNAL_FIFTH_FIELDS || i == JOURNAL_SIXTH_FIELDS ||
		     i == JOURNAL_SEVENTH_FIELDS) && r.p == r.end) {
			/* An entry of before the appended fields: the rest are absent (strings
			 * empty, enums 0, counts ACCT_NONE). */
			journal_absent(row, i);
			break;
		}
		if (journal_get_field(&r, &journal_fields[i], row) < 0)
			return -1;
	}
	if (r.p != r.end)
		return -1;
	*k = (enum journal_kind)p[2];
	*used = JOURNAL_ENTRY_HDR + plen;
	return 1;
}

long journal_segment_replay(const unsigned char *buf, size_t len, journal_replay_fn *cb,
                            void *arg, enum journal_end *end, size_t *good)
{
	size_t off = JOURNAL_SEG_HDR;
	long n = 0;

	*good = 0;
	if (len < JOURNAL_SEG_HDR) {
		/* The header goes out with the first entries: a short one is a cut write. */
		if (!len)
			*end = JOURNAL_END_CLEAN;
		else
			*end = memcmp(buf, journal_seg_hdr, len) ? JOURNAL_END_HEADER : JOURNAL_END_TORN;
		return 0;
	}
	if (memcmp(buf, journal_seg_hdr, JOURNAL_SEG_HDR) != 0) {
		*end = JOURNAL_END_HEADER;
		return 0;
	}
	for (;;) {
		struct acct_row row;
		enum journal_kind k;
		size_t used;
		int rc = journal_entry_decode(buf + off, len - off, &k, &row, &used);

		if (rc < 0) {
			*end = JOURNAL_END_CORRUPT;
			break;
		}
		if (rc == 0) {
			*end = off == len ? JOURNAL_END_CLEAN : JOURNAL_END_TORN;
			break;
		}
		cb(arg, k, &row);
		n++;
		off += used;
	}
	*good = off;
	return n;
}

/* ---- errors ---- */

/* Counts a journal error and logs it, at most once per JOURNAL_WARN_NS: a full disk
 * fails every flush of every thread. Any thread. */
static void journal_error(struct journal *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void journal_error(struct journal *j, const char *fmt, ...)
{
	uint64_t now = stats_now_ns();
	uint64_t last = atomic_load(&j->warn_last_ns);
	unsigned suppressed;
	char msg[512];
	va_list ap;

	stats_add(&stats.errors[STATS_ERR_JOURNAL], 1);
	if ((last && now - last < JOURNAL_WARN_NS) ||
	    !atomic_compare_exchange_strong(&j->warn_last_ns, &last, now)) {
		atomic_fetch_add(&j->warn_suppressed, 1);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	suppressed = atomic_exchange(&j->warn_suppressed, 0);
	if (suppressed)
		log_warn("journal: %s (and %u more errors since the last message)", msg, suppressed);
	else
		log_warn("journal: %s", msg);
}

/* ---- opening, replay ---- */

static void journal_free(struct journal *j)
{
	size_t i;

	for (i = 0; i < j->nold; i++)
		free(j->old[i]);
	free(j->old);
	free(j->dir);
	if (j->lock_fd >= 0)
		close(j->lock_fd);
	pthread_mutex_destroy(&j->names_lock);
	free(j);
}

static int journal_name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int journal_is_segment(const char *name)
{
	size_t n = strlen(name);

	return n > 2 && strcmp(name + n - 2, ".j") == 0;
}

/* Remembers the segment files present now: all from earlier runs. */
static int journal_list_old(struct journal *j, char *err, size_t errlen)
{
	DIR *d = opendir(j->dir);
	struct dirent *e;
	size_t cap = 0;
	int rc = -1;

	if (!d) {
		snprintf(err, errlen, "cannot list journal directory %s: %s", j->dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		if (!journal_is_segment(e->d_name))
			continue;
		if (j->nold == cap) {
			char **grown = realloc(j->old, (cap ? cap * 2 : 16) * sizeof(*grown));

			if (!grown)
				goto oom;
			j->old = grown;
			cap = cap ? cap * 2 : 16;
		}
		if (!(j->old[j->nold] = strdup(e->d_name)))
			goto oom;
		j->nold++;
	}
	if (j->nold)
		qsort(j->old, j->nold, sizeof(*j->old), journal_name_cmp);
	rc = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory listing %s", j->dir);
out:
	closedir(d);
	return rc;
}

struct journal *journal_open(const char *dir, int epoch_seconds, char *err, size_t errlen)
{
	size_t size = (sizeof(struct journal) + 63) / 64 * 64;
	char path[PATH_MAX];
	struct journal *j;
	struct timespec ts;

	if (epoch_seconds < 0) {
		snprintf(err, errlen, "journal epoch length must be 0 or more seconds");
		return NULL;
	}
	if (strlen(dir) + 1 + JOURNAL_FILE_NAME_MAX >= sizeof(path)) {
		snprintf(err, errlen, "journal directory path too long: %s", dir);
		return NULL;
	}
	if (!(j = aligned_alloc(64, size))) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	memset(j, 0, size);
	j->lock_fd = -1;
	pthread_mutex_init(&j->names_lock, NULL);
	if (!(j->dir = strdup(dir))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create journal directory %s: %s", dir, strerror(errno));
		goto fail;
	}
	/* Another agent replaying or deleting our files would lose them. */
	snprintf(path, sizeof(path), "%s/lock", dir);
	if ((j->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		goto fail;
	}
	if (flock(j->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, errlen, "journal directory %s: %s", dir, errno == EWOULDBLOCK ?
		         "in use by another running agent" : strerror(errno));
		goto fail;
	}
	if (journal_list_old(j, err, errlen) < 0)
		goto fail;
	/* Start time first, so that name order is run order. */
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(j->runid, sizeof(j->runid), "%013lld-%d",
	         (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, (int)getpid());
	j->epoch_seconds = epoch_seconds;
	j->epoch_started_ns = stats_now_ns();
	j->oldest = 1;
	atomic_store(&j->epoch, 1);
	return j;
fail:
	journal_free(j);
	return NULL;
}

static const char *journal_end_text(enum journal_end end)
{
	switch (end) {
	case JOURNAL_END_TORN: return "torn tail";
	case JOURNAL_END_CORRUPT: return "corrupt entry";
	case JOURNAL_END_HEADER: return "not a journal segment of a known version";
	default: return "clean";
	}
}

static long journal_replay_file(struct journal *j, const char *name, journal_replay_fn *cb,
                                void *arg)
{
	enum journal_end end = JOURNAL_END_CLEAN;
	char path[PATH_MAX];
	void *map = MAP_FAILED;
	struct stat st;
	size_t good = 0;
	long n = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", j->dir, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		log_error("journal: cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		log_error("journal: cannot stat %s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		n = 0;
		goto out;
	}
	/* Files of earlier runs: nobody writes or truncates them while mapped. */
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		log_error("journal: cannot map %s: %s", path, strerror(errno));
		goto out;
	}
	n = journal_segment_replay(map, (size_t)st.st_size, cb, arg, &end, &good);
	if (end != JOURNAL_END_CLEAN) {
		j->damaged++;
		stats_add(&stats.errors[STATS_ERR_JOURNAL], 1);
		log_warn("journal: %s: %s after %ld entries, %lld bytes dropped", path,
		         journal_end_text(end), n, (long long)st.st_size - (long long)good);
	}
	munmap(map, (size_t)st.st_size);
out:
	close(fd);
	return n;
}

long journal_replay(struct journal *j, journal_replay_fn *cb, void *arg)
{
	long total = 0;
	size_t i;

	j->damaged = 0;
	for (i = 0; i < j->nold; i++) {
		long n = journal_replay_file(j, j->old[i], cb, arg);

		if (n < 0)
			return -1;
		total += n;
	}
	return total;
}

int journal_replay_damaged(const struct journal *j)
{
	return j->damaged;
}

static void journal_unlink(const char *path)
{
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("journal: cannot delete %s: %s", path, strerror(errno));
}

void journal_replay_done(struct journal *j)
{
	char path[PATH_MAX];
	size_t i;

	for (i = 0; i < j->nold; i++) {
		snprintf(path, sizeof(path), "%s/%s", j->dir, j->old[i]);
		journal_unlink(path);
		free(j->old[i]);
	}
	free(j->old);
	j->old = NULL;
	j->nold = 0;
}

/* ---- logs ---- */

static void journal_path(const struct journal *j, char *buf, size_t cap, uint32_t epoch,
                         const char *name)
{
	snprintf(buf, cap, "%s/%s-%010" PRIu32 "-%s.j", j->dir, j->runid, epoch, name);
}

static int journal_name_valid(const char *name)
{
	size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");

	return n > 0 && n <= JOURNAL_NAME_MAX && name[n] == '\0';
}

/* Marks name open in the registry. 0, or -1 if it is open already or the table full. */
static int journal_name_claim(struct journal *j, const char *name)
{
	int i, rc = -1;

	pthread_mutex_lock(&j->names_lock);
	for (i = 0; i < j->nnames && strcmp(j->names[i].name, name) != 0; i++)
		;
	if (i == j->nnames && i < JOURNAL_LOGS_MAX) {
		snprintf(j->names[i].name, sizeof(j->names[i].name), "%s", name);
		j->nnames++;
	}
	if (i < j->nnames && !j->names[i].open) {
		j->names[i].open = 1;
		rc = 0;
	}
	pthread_mutex_unlock(&j->names_lock);
	return rc;
}

struct journal_log *journal_log_open(struct journal *j, const char *name)
{
	struct journal_log *l;

	if (!journal_name_valid(name)) {
		log_error("journal: bad log name \"%s\"", name);
		return NULL;
	}
	if (!(l = calloc(1, sizeof(*l)))) {
		log_error("journal: out of memory");
		return NULL;
	}
	if (journal_name_claim(j, name) < 0) {
		log_error("journal: log \"%s\" is open already, or too many logs", name);
		free(l);
		return NULL;
	}
	l->j = j;
	l->fd = -1;
	snprintf(l->name, sizeof(l->name), "%s", name);
	return l;
}

/* Counts an entry in the current epoch and returns it (see WHY DELETION IS SAFE). */
static uint32_t journal_enter(struct journal *j)
{
	for (;;) {
		uint32_t e = atomic_load(&j->epoch);
		atomic_int_fast64_t *c = &j->outstanding[e % JOURNAL_EPOCHS];

		atomic_fetch_add(c, 1);
		if (atomic_load(&j->epoch) == e)
			return e;
		atomic_fetch_sub(c, 1);
	}
}

void journal_release(struct journal *j, uint32_t epoch)
{
	if (epoch)
		atomic_fetch_sub(&j->outstanding[epoch % JOURNAL_EPOCHS], 1);
}

static int journal_log_open_file(struct journal_log *l)
{
	struct stat st;

	if ((l->fd = open(l->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		return -1;
	/* Not empty when a log of the same name was reopened within the epoch. */
	if (fstat(l->fd, &st) < 0) {
		close(l->fd);
		l->fd = -1;
		return -1;
	}
	l->size = st.st_size;
	return 0;
}

static int journal_log_write(struct journal_log *l)
{
	unsigned char *p = l->buf + JOURNAL_SEG_HDR;
	size_t n = l->len, done = 0;
	int err;

	if (l->broken) {
		journal_error(l->j, "%s: not written: an earlier write failed midway", l->path);
		return -1;
	}
	if (l->fd < 0 && journal_log_open_file(l) < 0)
		goto fail;
	if (l->size == 0) {
		p = l->buf;
		memcpy(p, journal_seg_hdr, JOURNAL_SEG_HDR);
		n += JOURNAL_SEG_HDR;
	}
	while (done < n) {
		ssize_t w = write(l->fd, p + done, n - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = ENOSPC;
			goto fail;
		}
		done += (size_t)w;
	}
	l->size += (off_t)n;
	return 0;
fail:
	err = errno;
	/* Cut a partial entry off, or replay would stop there and miss what follows. */
	if (done && ftruncate(l->fd, l->size) < 0)
		l->broken = 1;
	journal_error(l->j, "writing %s: %s", l->path, strerror(err));
	return -1;
}

int journal_flush(struct journal_log *l)
{
	int rc;

	if (!l->len)
		return 0;
	rc = journal_log_write(l);
	l->len = 0;
	journal_release(l->j, l->epoch);   /* the buffer's own count */
	return rc;
}

uint32_t journal_append(struct journal_log *l, enum journal_kind k, const struct acct_row *row)
{
	struct journal *j = l->j;
	uint32_t e = journal_enter(j);
	size_t n;

	if (e != l->epoch || JOURNAL_LOG_BUF - l->len < JOURNAL_ENTRY_MAX) {
		journal_flush(l);   /* what is buffered belongs to the old epoch's file */
		if (e != l->epoch) {
			if (l->fd >= 0)
				close(l->fd);
			l->fd = -1;
			l->size = 0;
			l->broken = 0;
			l->epoch = e;
			journal_path(j, l->path, sizeof(l->path), e, l->name);
		}
	}
	n = journal_entry_encode(k, row, l->buf + JOURNAL_SEG_HDR + l->len, JOURNAL_LOG_BUF - l->len);
	if (!n) {
		journal_release(j, e);
		journal_error(j, "%s: entry for %.*s not journaled: kind or enum out of range",
		              l->name, ACCT_ID_MAX - 1, row->request_id);
		return 0;
	}
	if (!l->len)
		atomic_fetch_add(&j->outstanding[e % JOURNAL_EPOCHS], 1);
	l->len += n;
	return e;
}

void journal_log_close(struct journal_log *l)
{
	struct journal *j;
	int i;

	if (!l)
		return;
	j = l->j;
	journal_flush(l);
	if (l->fd >= 0)
		close(l->fd);
	pthread_mutex_lock(&j->names_lock);
	for (i = 0; i < j->nnames; i++)
		if (strcmp(j->names[i].name, l->name) == 0)
			j->names[i].open = 0;
	pthread_mutex_unlock(&j->names_lock);
	free(l);
}

/* ---- epochs ---- */

static void journal_delete_epoch(struct journal *j, uint32_t epoch)
{
	char path[PATH_MAX];
	int i;

	pthread_mutex_lock(&j->names_lock);
	for (i = 0; i < j->nnames; i++) {
		journal_path(j, path, sizeof(path), epoch, j->names[i].name);
		journal_unlink(path);
	}
	pthread_mutex_unlock(&j->names_lock);
}

/* Deletes the files of the epochs up to last with nothing unreleased, in any order. */
static void journal_retire(struct journal *j, uint32_t last)
{
	uint32_t e;

	for (e = j->oldest; e <= last; e++) {
		unsigned s = e % JOURNAL_EPOCHS;

		if (!j->retired[s] && atomic_load(&j->outstanding[s]) == 0) {
			journal_delete_epoch(j, e);
			j->retired[s] = 1;
		}
	}
	while (j->oldest <= last && j->retired[j->oldest % JOURNAL_EPOCHS]) {
		j->retired[j->oldest % JOURNAL_EPOCHS] = 0;
		j->oldest++;
	}
}

void journal_tick(struct journal *j)
{
	uint64_t now = stats_now_ns();
	uint32_t cur = atomic_load(&j->epoch);

	/* First, so that a freed slot can take the next epoch at once. */
	journal_retire(j, cur - 1);
	if (now - j->epoch_started_ns >= (uint64_t)j->epoch_seconds * 1000000000u) {
		/* Live epochs are oldest..cur; the next one needs a slot of its own. */
		if (cur + 1 - j->oldest < JOURNAL_EPOCHS) {
			atomic_store(&j->epoch, cur + 1);
			j->epoch_started_ns = now;
		} else if (!j->stall_warned_ns || now - j->stall_warned_ns >= JOURNAL_WARN_NS) {
			log_warn("journal: epoch %" PRIu32 " still has %lld unreleased entries: no new"
			         " epoch until they are resolved, files grow meanwhile", j->oldest,
			         (long long)atomic_load(&j->outstanding[j->oldest % JOURNAL_EPOCHS]));
			j->stall_warned_ns = now;
		}
	}
}

void journal_close(struct journal *j)
{
	uint32_t cur, e;
	long long kept = 0;

	if (!j)
		return;
	/* No log is left to append: the current epoch may go too. */
	cur = atomic_load(&j->epoch);
	journal_retire(j, cur);
	for (e = j->oldest; e <= cur; e++)
		if (!j->retired[e % JOURNAL_EPOCHS])
			kept += (long long)atomic_load(&j->outstanding[e % JOURNAL_EPOCHS]);
	if (kept)
		log_warn("journal: %lld unresolved entries kept in %s for the next run", kept, j->dir);
	journal_free(j);
}
