/* libFuzzer target: queryd's decoder of the agent's control replies
 * (queryd/live.c: live_reply_decode) over arbitrary bytes (peer input). A reply it
 * accepts must come out as JSON that cJSON parses back. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so ASan catches any read past the end. */
	unsigned char *buf = malloc(size ? size : 1);
	cJSON *out, *back;
	char err[256];
	char *text;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	out = live_reply_decode(buf, size, err, sizeof(err));
	if (out) {
		text = cJSON_PrintUnformatted(out);
		if (text) {
			back = cJSON_Parse(text);
			if (!back || !cJSON_IsObject(back))
				abort();
			cJSON_Delete(back);
			free(text);
		}
		cJSON_Delete(out);
	} else if (!memchr(err, '\0', sizeof(err)) || err[0] == '\0') {
		abort();
	}
	free(buf);
	return 0;
}
