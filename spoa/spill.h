/* spill: the on-disk FIFO of usage rows waiting for the store, one file ("spill") in
 * the journal directory. The intake thread (and the main thread replaying the journal at
 * start) pushes a row the full queue refused; the writer pushes the rows of a batch the
 * store kept refusing, reads rows back when the store works again and removes them once
 * committed. A mutex guards the file: any thread may push, only the writer reads.
 *
 * A spilled row keeps its journal epochs (acct_row.journal_epoch), unreleased until the
 * writer commits it: the journal, not this file, is what survives a crash. So the file
 * is emptied when opened (a restarted agent's journal replays every row it held), and
 * nothing is fsynced. The file is truncated whenever its last row is read and removed.
 *
 * Gauges (stats.h): spilled_rows, and spill_head_ms, when the oldest waiting row was
 * spilled (0: none), which metrics turn into the writer's lag. */
#ifndef TALLY_SPILL_H
#define TALLY_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"

struct spill;

/* Opens dir/spill, created or emptied. max_bytes bounds the file's size (rows written
 * since it was last empty): beyond it pushes fail. NULL with a message in err. */
struct spill *spill_open(const char *dir, int64_t max_bytes, char *err, size_t errlen);

/* Closes the file (leaving it as it is: the next spill_open empties it) and frees s. */
void spill_close(struct spill *s);

/* Appends *row, its journal epochs included. 0, or -1 if the file would exceed its
 * bound or cannot be written (the row is not stored; a write error is logged at most
 * every few seconds and counted in stats.errors[STATS_ERR_JOURNAL]). Any thread. */
int spill_push(struct spill *s, const struct acct_row *row);

/* Copies up to max rows from the head into out, oldest first, journal epochs restored,
 * without removing them. Returns how many; 0: none, or the file cannot be read back
 * (logged, counted, and the file emptied: its rows wait in the journal for the next
 * start). Writer only. */
size_t spill_read(struct spill *s, struct acct_row *out, size_t max);

/* Removes the rows the last spill_read returned; truncates the file once it holds no
 * row. Writer only. */
void spill_advance(struct spill *s);

/* Rows waiting in the file. Any thread. */
size_t spill_rows(struct spill *s);

#endif
