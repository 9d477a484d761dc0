/* libFuzzer target: the control socket's decoders over arbitrary bytes (peer input), as
 * the connection reads them: frames split off the front, each payload decoded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so ASan catches any read past the end. */
	unsigned char *buf = malloc(size ? size : 1);
	const unsigned char *p = buf;
	size_t left = size, n;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	while (control_frame_parse(p, left, &n) == CONTROL_FRAME_WHOLE) {
		struct control_request req;

		if (!control_request_decode(p + 4, n, &req) &&
		    (req.max > CONTROL_INFLIGHT_CAP ||
		     (req.cmd != CONTROL_STATUS && req.cmd != CONTROL_KEYS && req.cmd != CONTROL_INFLIGHT)))
			abort();
		p += 4 + n;
		left -= 4 + n;
	}
	free(buf);
	return 0;
}
