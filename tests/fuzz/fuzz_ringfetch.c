/* libFuzzer target: splitting HAProxy's CLI answer into event lines (ringfetch_split).
 * Input: one byte of cut count, then the answer, fed in that many pieces of sizes taken
 * from the answer's own bytes. Checks that every line passed is within the answer, has
 * no newline, and that the lines passed equal those of a reference split. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringfetch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_lines {
	long n;
	uint64_t sum;
};

static void fuzz_ringfetch_line(void *arg, const char *line, size_t len)
{
	struct fuzz_lines *l = arg;
	size_t i;

	if (len == 0 || len >= RINGFETCH_LINE_MAX || memchr(line, '\n', len))
		abort();
	l->n++;
	for (i = 0; i < len; i++)
		l->sum = l->sum * 31 + (unsigned char)line[i];
	l->sum = l->sum * 31 + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char buf[RINGFETCH_LINE_MAX];
	struct fuzz_lines got = { 0, 0 }, want = { 0, 0 };
	size_t pos = 0, held = 0, i, start = 0;
	long lines = 0;
	int skipping = 0, cuts;

	if (size < 1)
		return 0;
	cuts = data[0] % 8 + 1;
	data++;
	size--;
	while (pos < size) {
		size_t piece = cuts-- > 1 ? (size_t)data[pos] * 97 % (size - pos) + 1 : size - pos;

		if (piece > sizeof(buf) - held)
			piece = sizeof(buf) - held;
		memcpy(buf + held, data + pos, piece);
		pos += piece;
		held = ringfetch_split(buf, held + piece, &skipping, fuzz_ringfetch_line, &got, &lines);
		if (held >= RINGFETCH_LINE_MAX || lines != got.n)
			abort();
	}
	/* Reference: every newline-terminated, non-empty line shorter than the limit. */
	for (i = 0; i < size; i++) {
		if (data[i] != '\n')
			continue;
		if (i > start && i - start < RINGFETCH_LINE_MAX)
			fuzz_ringfetch_line(&want, (const char *)data + start, i - start);
		start = i + 1;
	}
	if (size < RINGFETCH_LINE_MAX && (got.n != want.n || got.sum != want.sum))
		abort();
	return 0;
}
