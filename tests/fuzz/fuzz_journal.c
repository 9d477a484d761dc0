/* libFuzzer target: the journal entry decoder and the replay of a whole segment, on
 * arbitrary bytes (segment files are input to a restarted agent). Every decoded row
 * must be well formed and must survive encode + decode unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_str_ok(const char *s, size_t cap)
{
	return memchr(s, 0, cap) != NULL;
}

static void fuzz_check_row(enum journal_kind k, const struct acct_row *row)
{
	unsigned char buf[JOURNAL_ENTRY_MAX];
	struct acct_row again;
	enum journal_kind k2;
	size_t n, used;

	if ((k != JOURNAL_DECISION && k != JOURNAL_ROW) ||
	    (unsigned)row->outcome >= ACCT_OUTCOME_COUNT ||
	    (unsigned)row->usage_source >= ACCT_USAGE_SOURCE_COUNT ||
	    !fuzz_str_ok(row->request_id, sizeof(row->request_id)) ||
	    !fuzz_str_ok(row->model, sizeof(row->model)) ||
	    !fuzz_str_ok(row->model_requested, sizeof(row->model_requested)) ||
	    !fuzz_str_ok(row->provider, sizeof(row->provider)) ||
	    !fuzz_str_ok(row->verdict, sizeof(row->verdict)) ||
	    !fuzz_str_ok(row->termination, sizeof(row->termination)) ||
	    row->journal_epoch[0] || row->journal_epoch[1])
		abort();
	n = journal_entry_encode(k, row, buf, sizeof(buf));
	/* Both rows were zeroed before decoding, padding included: memcmp is exact. */
	if (!n || journal_entry_decode(buf, n, &k2, &again, &used) != 1 || used != n || k2 != k ||
	    memcmp(&again, row, sizeof(again)) != 0)
		abort();
}

static void fuzz_replay_cb(void *arg, enum journal_kind k, const struct acct_row *row)
{
	(*(long *)arg)++;
	fuzz_check_row(k, row);
}

static void fuzz_decode_one(const unsigned char *p, size_t size)
{
	struct acct_row row;
	enum journal_kind k;
	size_t used;

	if (journal_entry_decode(p, size, &k, &row, &used) == 1) {
		if (used > size)
			abort();
		fuzz_check_row(k, &row);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum journal_end end;
	size_t good;
	long seen = 0, n;

	fuzz_decode_one(data, size);
	/* Again with the checksum made right, so that mutations reach the field checks. */
	if (size >= JOURNAL_ENTRY_HDR) {
		unsigned char *p = malloc(size);
		size_t plen = (size_t)data[0] | (size_t)data[1] << 8;
		uint32_t sum;

		if (!p)
			return 0;
		memcpy(p, data, size);
		if (plen > size - JOURNAL_ENTRY_HDR)
			plen = size - JOURNAL_ENTRY_HDR;
		sum = journal_entry_checksum(p[2], p + JOURNAL_ENTRY_HDR, plen);
		for (int i = 0; i < 4; i++)
			p[3 + i] = (unsigned char)(sum >> (8 * i));
		fuzz_decode_one(p, size);
		free(p);
	}
	n = journal_segment_replay(data, size, fuzz_replay_cb, &seen, &end, &good);
	if (n != seen || good > size || (end == JOURNAL_END_CLEAN && good != size))
		abort();
	return 0;
}
