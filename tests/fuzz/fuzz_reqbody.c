/* libFuzzer target: reqbody_inspect over arbitrary request-body bytes (peer input). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reqbody.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* A copy of exactly size bytes, so ASan catches any read past the end. */
	char *body = malloc(size ? size : 1);
	struct reqbody_info info;
	enum reqbody_status st;

	if (!body)
		return 0;
	memcpy(body, data, size);
	st = reqbody_inspect(body, size, &info);
	if (info.has_model && strlen(info.model) >= REQBODY_MODEL_MAX)
		abort();
	if (st == REQBODY_COMPLETE && info.stream != 0 && info.stream != 1)
		abort();
	free(body);
	return 0;
}
