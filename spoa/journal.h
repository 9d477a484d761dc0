/* journal: append-only segment files that make admitted requests and finished rows
 * survive a kill -9 of the agent (write() to the page cache suffices; power loss is out
 * of scope, so no fsync). The I/O threads journal each decision before its ACK goes
 * out, the intake thread each finished row; the writer releases both once the row is
 * committed or counted dropped; the main thread rotates epochs and deletes the segment
 * files nothing refers to any more. A restarted agent replays the files it finds.
 *
 * Threads: journal_open, journal_replay, journal_replay_done, journal_tick and
 * journal_close run on the main thread; a journal_log belongs to the one thread that
 * appends to it; journal_release runs on any thread. The entry codec is pure. */
#ifndef TALLY_JOURNAL_H
#define TALLY_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"

enum journal_kind { JOURNAL_DECISION = 1, JOURNAL_ROW = 2 };

/* Epochs that may hold unreleased entries at once. When the oldest of them still has
 * some, journal_tick stops starting new epochs (and warns) until it is released. */
#define JOURNAL_EPOCHS 256

/* Log names: 1 to JOURNAL_NAME_MAX characters from [A-Za-z0-9_]. */
#define JOURNAL_NAME_MAX 16

/* Entry layout: u16 payload length, u8 kind, u32 FNV-1a of kind and payload (all little
 * endian), then the payload. JOURNAL_ENTRY_MAX bounds the encoding of any row. */
#define JOURNAL_ENTRY_HDR 7
#define JOURNAL_STR_ENC_MAX(cap) (2 + (cap) - 1)   /* varint length, bytes, no NUL */
#define JOURNAL_INT_FIELDS 30                      /* each a varint of at most 10 bytes */
#define JOURNAL_PAYLOAD_MAX                                                        \
	(JOURNAL_STR_ENC_MAX(ACCT_ID_MAX) + 3 * JOURNAL_STR_ENC_MAX(ACCT_NAME_MAX) +   \
	 2 * JOURNAL_STR_ENC_MAX(ACCT_SHORT_MAX) +                                     \
	 JOURNAL_STR_ENC_MAX(sizeof(((struct acct_row *)0)->termination)) +           \
	 JOURNAL_STR_ENC_MAX(ACCT_RESPONSE_ID_MAX) + JOURNAL_STR_ENC_MAX(ACCT_TIER_MAX) + \
	 JOURNAL_STR_ENC_MAX(ACCT_END_USER_MAX) + JOURNAL_STR_ENC_MAX(TAGS_TEXT_MAX) +   \
	 JOURNAL_INT_FIELDS * 10)
#define JOURNAL_ENTRY_MAX (JOURNAL_ENTRY_HDR + JOURNAL_PAYLOAD_MAX)

struct journal;
struct journal_log;

/* Receives one replayed entry; row is borrowed for the duration of the call. */
typedef void journal_replay_fn(void *arg, enum journal_kind k, const struct acct_row *row);

/* How the bytes of a segment ended. */
enum journal_end {
	JOURNAL_END_CLEAN,    /* every byte belonged to a valid entry */
	JOURNAL_END_TORN,     /* the last entry is incomplete (a write cut short) */
	JOURNAL_END_CORRUPT,  /* an entry failed its checksum or its field checks */
	JOURNAL_END_HEADER,   /* not a segment, or a format version this agent cannot read */
};

/* Encodes one entry into buf. Strings are read up to their field's capacity less one,
 * so a missing NUL cannot overrun; journal_epoch is not encoded. Returns the entry's
 * size (at most JOURNAL_ENTRY_MAX), or 0 when k or an enum of row is out of range or
 * cap is too small. */
size_t journal_entry_encode(enum journal_kind k, const struct acct_row *row,
                            unsigned char *buf, size_t cap);

/* The checksum stored in an entry's header: FNV-1a over the kind byte and payload. */
uint32_t journal_entry_checksum(unsigned char kind, const unsigned char *payload, size_t n);

/* Decodes the entry at p (len bytes available). 1: *k, *row (every field written,
 * strings NUL-terminated, journal_epoch zero) and *used set; 0: p holds only the start
 * of a plausible entry; -1: not a valid entry. */
int journal_entry_decode(const unsigned char *p, size_t len, enum journal_kind *k,
                         struct acct_row *row, size_t *used);

/* Replays a whole segment held in memory (a file's bytes): checks its header, then
 * calls cb for each entry until the end or the first invalid one. Returns the number
 * of entries; *end says how the bytes ended and *good how many of them were valid. */
long journal_segment_replay(const unsigned char *buf, size_t len, journal_replay_fn *cb,
                            void *arg, enum journal_end *end, size_t *good);

/* Opens (creating it 0700 if missing) the journal directory and locks it against a
 * second agent. Segment files already there belong to earlier runs: they are kept
 * for journal_replay. epoch_seconds: length of an epoch, 0 for a new one at every
 * journal_tick. Returns NULL with a message in err on failure. Main thread, before the
 * other threads start. */
struct journal *journal_open(const char *dir, int epoch_seconds, char *err, size_t errlen);

/* Calls cb for every valid entry of the earlier runs' segments, in file name order and
 * in written order within a file. A damaged tail ends its file: it is logged, counted
 * in stats and journal_replay_damaged. Entries may repeat rows already committed (an
 * epoch is deleted only once all its entries are resolved): the caller dedupes on
 * request_id. Returns the number of entries, or -1 on an I/O error (keep the files
 * then: do not call journal_replay_done). cb may append to journal logs. */
long journal_replay(struct journal *j, journal_replay_fn *cb, void *arg);

/* Files whose tail the last journal_replay dropped. */
int journal_replay_damaged(const struct journal *j);

/* The caller has re-journaled what it still needs: deletes the earlier runs' files. */
void journal_replay_done(struct journal *j);

/* Opens the log of one producer thread ("io0", "intake"); names are unique among the
 * open logs. Afterwards only that thread uses it. NULL (logged) on a bad name. */
struct journal_log *journal_log_open(struct journal *j, const char *name);

/* Buffers one entry and returns the epoch it belongs to (>= 1), which must be passed
 * to journal_release exactly once. Writes the buffer out first if it is full or the
 * epoch changed. Returns 0 (nothing to release) if the row cannot be encoded: an enum
 * out of range, a caller bug, counted as a journal error. */
uint32_t journal_append(struct journal_log *l, enum journal_kind k, const struct acct_row *row);

/* Writes everything buffered, normally with one write(). Call it before the entries'
 * effects leave the thread (the ACKs, the queued rows). On error the entries are lost
 * from the journal (the agent goes on without durability): counted in
 * stats.errors[STATS_ERR_JOURNAL], logged at most every few seconds, -1. */
int journal_flush(struct journal_log *l);

/* Flushes, closes and frees the log. Its owning thread, or any once that one stopped. */
void journal_log_close(struct journal_log *l);

/* An entry of that epoch is resolved (its row committed or counted dropped). Any
 * thread; epoch 0 is a no-op. */
void journal_release(struct journal *j, uint32_t epoch);

/* Main thread, about once a second: starts a new epoch every epoch_seconds and deletes
 * the files of earlier epochs whose entries are all released. */
void journal_tick(struct journal *j);

/* After every log is closed: deletes the files of fully released epochs, keeps (and
 * logs) the others for the next run, frees j. */
void journal_close(struct journal *j);

#endif
