/* rollup: the rollups' summed columns (see rollup.h). */
#include "rollup.h"

#include <inttypes.h>
#include <stdio.h>

const char *const rollup_names[ROLLUP_NAMED] = {
	[ROLLUP_REQUESTS] = "requests",
	[ROLLUP_ERRORS] = "errors",
	[ROLLUP_STREAMS] = "streams",
	[ROLLUP_PROMPT_TOKENS] = "prompt_tokens",
	[ROLLUP_COMPLETION_TOKENS] = "completion_tokens",
	[ROLLUP_CACHED_TOKENS] = "cached_tokens",
	[ROLLUP_CACHE_CREATION_TOKENS] = "cache_creation_tokens",
	[ROLLUP_REASONING_TOKENS] = "reasoning_tokens",
	[ROLLUP_COST] = "cost_micros",
	[ROLLUP_UNPRICED] = "unpriced",
	[ROLLUP_DURATION] = "duration_ms_sum",
	[ROLLUP_ESTIMATED] = "estimated",
	[ROLLUP_ESTIMATED_TOKENS] = "estimated_tokens",
	[ROLLUP_ESTIMATED_COST] = "estimated_cost_micros",
	[ROLLUP_AUDIO_INPUT_TOKENS] = "audio_input_tokens",
	[ROLLUP_AUDIO_OUTPUT_TOKENS] = "audio_output_tokens",
	[ROLLUP_WEB_SEARCH_CALLS] = "web_search_calls",
};

void rollup_column(int i, char *buf, size_t len)
{
	if (i < ROLLUP_NAMED)
		snprintf(buf, len, "%s", rollup_names[i]);
	else if (i - ROLLUP_NAMED < LATENCY_BUCKETS - 1)
		snprintf(buf, len, "lat_le_%" PRId64, latency_bounds[i - ROLLUP_NAMED]);
	else
		snprintf(buf, len, "lat_gt_%" PRId64, latency_bounds[LATENCY_BUCKETS - 2]);
}
