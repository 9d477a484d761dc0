/* libFuzzer target: a whole SPOP conversation (frames, NOTIFY messages, typed data, the
 * decision on their arguments, long bodies' pieces) from arbitrary bytes, against a real
 * keytable. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/fixture.h"
#include "log.h"
#include "longbody.h"
#include "session.h"
#include "spop.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct fixture fx;

static void fuzz_session_cleanup(void)
{
	fixture_close(&fx);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_level(LOG_ERROR);
	if (fixture_open(&fx) < 0)
		abort();
	atexit(fuzz_session_cleanup);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char out[4 * (16380 + 4)];
	unsigned char *in = malloc(size ? size : 1);
	struct session s;
	size_t off = 0, used;

	if (!in)
		return 0;
	memcpy(in, data, size);
	session_init(&s, 16380);
	s.longbody = longbody_new(1 << 18, 1 << 18);
	/* Feed like the worker does: whole input, replies drained whenever full. */
	for (;;) {
		struct spop_writer w;
		enum session_result r;

		spop_writer_init(&w, out, sizeof(out));
		r = session_feed(&s, fx.kt, in + off, size - off, &used, &w);
		if (w.len > sizeof(out) || used > size - off)
			abort();
		off += used;
		if (r == SESSION_CLOSE || used == 0)
			break;
	}
	longbody_free(s.longbody);
	free(in);
	return 0;
}
