/* libFuzzer target: TZif files (common/tz.h), as the zone directory holds them: a file
 * there is not ours, and a spoiled one must be refused, never read past its end.
 * Input: the file's bytes. What a parsed zone must give: offsets within RFC 8536's
 * range and periods that tile time around instants from 1900 to 2100. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t instants[] = { -2208988800000LL, 0, 1796644800000LL,
		2147483647000LL, 2224713600000LL, 4102444800000LL };
	struct tz *z = tz_parse(data, size);

	if (!z)
		return 0;
	for (size_t i = 0; i < sizeof(instants) / sizeof(instants[0]); i++) {
		int32_t off = tz_offset(z, instants[i] / 1000);

		if (off < -89999 || off > 93599)
			abort();
		for (enum period_kind k = PERIOD_DAY; k <= PERIOD_MONTH; k++) {
			int64_t s = tz_period_start_ms(z, k, instants[i]);
			int64_t e = tz_period_end_ms(z, k, instants[i]);

			/* A zone whose offsets jump back and forth within hours may not tile;
			 * what must hold for any zone is a period around the instant. */
			if (!(s <= instants[i] && instants[i] < e))
				abort();
		}
	}
	tz_free(z);
	return 0;
}
