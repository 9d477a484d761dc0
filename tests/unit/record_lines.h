/* Records a real HAProxy 2.6.12 sent the agent (ring and UDP copy are identical),
 * captured from the integration stack (tests/integration/stack.py) with the mock
 * upstream, the gateway secret put in as HAProxy's log-format now does. Shared by the
 * record and usage unit tests. */
#ifndef TALLY_TEST_RECORD_LINES_H
#define TALLY_TEST_RECORD_LINES_H

/* What vouches for these records (the MACs are not checked here: test_record's
 * authentication test makes real ones). */
#define REC_MAC   "cmVjLW1hYy1yZWMtbWFjLXJlYy1tYWMtcmVjLW1hYyE="
#define REC_NONCE "4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37"
#define REC_NMAC  "bm1hYy1ubWFjLW5tYWMtbm1hYy1ubWFjLW5tYWMtbm0="

/* unary chat completion, usage read by json_query */
#define REAL_OPENAI_UNARY \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 3433c753-3df1-4ef6-9db7-2fdb386e6966 1796278643 552 200 342 555 3 0 0 2 5 -- " \
	"be_mock_openai allow 1 mock-gpt mock-openai 0 - - mock-gpt 1000 500 200 50 - - - - -"

/* stream with include_usage, 3 frames (whole body in the head) */
#define REAL_OPENAI_STREAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 777f11f2-8505-499f-ac07-bbb93ca2cc75 1796278643 560 200 363 1370 0 0 0 1 1 --" \
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c2 s 1262" \
	" {\"n\":6,\"ws\":0,\"ev\":[{\"r\":\"f\",\"e\":\"\",\"d\":{\"id\":\"chatcmpl-mock3cc46b" \
	"bbdd0c59b2\",\"model\":\"mock-gpt\",\"usage\":null}},{\"r\":\"sl\",\"e\":\"\",\"d\":{\"" \
	"id\":\"chatcmpl-mock3cc46bbbdd0c59b2\",\"model\":\"mock-gpt\",\"usage\":{\"prompt_toke" \
	"ns\":12,\"completion_tokens\":3,\"total_tokens\":15}}}]}"

/* stream with cache read and creation */
#define REAL_ANTHROPIC_STREAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b3477547-3a52-422f-9350-6f3926e642de 1796278643 563 200 391 1172 0 0 0 0 0 --" \
	" be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - - " \
	"c2 s 1064 {\"n\":8,\"ws\":0,\"ev\":[{\"r\":\"fs\",\"e\":\"message_start\",\"d\":{\"typ" \
	"e\":\"message_start\",\"message\":{\"id\":\"msg_mock70c27fe9a3ed4b96\",\"model\":\"moc" \
	"k-claude\",\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":2000,\"cach" \
	"e_read_input_tokens\":1000,\"output_tokens\":1}}}},{\"r\":\"l\",\"e\":\"message_delta\"" \
	",\"d\":{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":40}}}]}"

/* unary message, usage read by json_query */
#define REAL_ANTHROPIC_UNARY \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b0ba04d8-3598-4e70-993e-d304a377e336 1796278643 564 200 279 362 0 0 0 0 0 -- " \
	"be_mock_anthropic allow 1 mock-claude mock-anthropic 0 - - mock-claude - - - - 100 2" \
	"0 - - -"

/* 200-frame stream: head, gap, tail */
#define REAL_OPENAI_LONG_STREAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 9bcf265f-e389-4161-bf8b-e7a0aced3c04 1796278643 566 200 324 51504 0 0 0 0 1 -" \
	"- be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c2 s 513" \
	"96 {\"n\":19,\"ws\":0,\"ev\":[{\"r\":\"f\",\"e\":\"\",\"d\":{\"id\":\"chatcmpl-mock34e" \
	"aece95f371b92\",\"model\":\"mock-gpt\",\"usage\":null}},{\"r\":\"sl\",\"e\":\"\",\"d\"" \
	":{\"id\":\"chatcmpl-mock34eaece95f371b92\",\"model\":\"mock-gpt\",\"usage\":{\"prompt_" \
	"tokens\":12,\"completion_tokens\":200,\"total_tokens\":212}}}]}"

/* upstream cut before the Lua filter saw a byte: no capture */
#define REAL_ANTHROPIC_CUT_NO_CAPTURE \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b29c2e7d-3c3e-4454-a927-a872a0742c68 1796278643 568 200 298 1085 2 0 0 0 2 SD" \
	" be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - " \
	"- -"

/* client gone after 3 frames */
#define REAL_OPENAI_CLIENT_ABORT \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b50460c9-10a3-410d-aabe-ac6c8ebcd9db 1796278643 571 200 296 1392 0 0 0 0 101 " \
	"CD be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c2 s 12" \
	"84 {\"n\":5,\"ws\":0,\"ev\":[{\"r\":\"f\",\"e\":\"\",\"d\":{\"id\":\"chatcmpl-mock93d9" \
	"e00eddfcdba4\",\"model\":\"mock-gpt\",\"usage\":null}}]}"

/* upstream cut after message_start and 5 frames (x-mock-cached-tokens 7) */
#define REAL_ANTHROPIC_CUT \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " e29673c1-3dc0-45b6-8aab-9a4ffa400797 1796278899 249 200 341 1145 3 0 0 3 21 S" \
	"D be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - -" \
	" c2 s 916 {\"n\":6,\"ws\":0,\"ev\":[{\"r\":\"fsl\",\"e\":\"message_start\",\"d\":{\"ty" \
	"pe\":\"message_start\",\"message\":{\"id\":\"msg_mock2913b7f99159e290\",\"model\":\"mo" \
	"ck-claude\",\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":0,\"cache_" \
	"read_input_tokens\":7,\"output_tokens\":1}}}}]}"

/* upstream cut after 150 of 200 frames: message_start in the head, no message_delta in the tail */
#define REAL_ANTHROPIC_CUT_LONG \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " a514f36d-e9d4-43ce-b1e8-d53fa1162dfe 1796278899 272 200 323 18820 1 0 1 0 175" \
	" SD be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - -" \
	" - c2 s 18589 {\"n\":37,\"ws\":0,\"ev\":[{\"r\":\"fsl\",\"e\":\"message_start\",\"d\":" \
	"{\"type\":\"message_start\",\"message\":{\"id\":\"msg_mock7e4f7d096561be4d\",\"model\"" \
	":\"mock-claude\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}}]}"

/* 200 frames, CRLF: message_start in the head, message_delta in the tail */
#define REAL_ANTHROPIC_LONG_STREAM_CRLF \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 1f837c20-fe5d-4d0c-98e7-c2cb27a626dc 1796278899 448 200 314 25849 0 0 0 1 2 -" \
	"- be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - -" \
	" c2 s 25741 {\"n\":37,\"ws\":0,\"ev\":[{\"r\":\"fs\",\"e\":\"message_start\",\"d\":{\"" \
	"type\":\"message_start\",\"message\":{\"id\":\"msg_mock912c1ba9b88a5f91\",\"model\":\"" \
	"mock-claude\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}},{\"r\":\"l\",\"e" \
	"\":\"message_delta\",\"d\":{\"type\":\"message_delta\",\"usage\":{\"output_tokens\":20" \
	"0}}}]}"

/* 3 frames, CRLF, cached 4 and reasoning 2 in the usage chunk */
#define REAL_OPENAI_STREAM_CRLF \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 08ae9c91-2940-418e-8946-93be2e4b1472 1796278899 451 200 384 1477 0 0 0 0 0 --" \
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c2 s 1369" \
	" {\"n\":6,\"ws\":0,\"ev\":[{\"r\":\"f\",\"e\":\"\",\"d\":{\"id\":\"chatcmpl-mock996d82" \
	"98bcd56ef4\",\"model\":\"mock-gpt\",\"usage\":null}},{\"r\":\"sl\",\"e\":\"\",\"d\":{\"" \
	"id\":\"chatcmpl-mock996d8298bcd56ef4\",\"model\":\"mock-gpt\",\"usage\":{\"prompt_toke" \
	"ns\":12,\"completion_tokens\":3,\"total_tokens\":15,\"prompt_tokens_details\":{\"cache" \
	"d_tokens\":4},\"completion_tokens_details\":{\"reasoning_tokens\":2}}}}]}"

/* 4 frames, a longer model name: 1593 bytes (HAProxy counts 1594), the usage chunk
 * across the head (1536 bytes) and the tail */
#define REAL_OPENAI_STREAM_SEAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 6ea53ed3-dcf1-450f-a44a-088ed2020720 1796279475 376 200 371 1702 0 0 0 1 1 --" \
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c2 s 1594" \
	" {\"n\":7,\"ws\":0,\"ev\":[{\"r\":\"f\",\"e\":\"\",\"d\":{\"id\":\"chatcmpl-mock6eac40" \
	"76d1101bb3\",\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"usage\":null}},{\"r\":\"sl\",\"e\":" \
	"\"\",\"d\":{\"id\":\"chatcmpl-mock6eac4076d1101bb3\",\"model\":\"mock-gpt-xxxxxxxxxxxx" \
	"\",\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":20,\"total_tokens\":32}}}]}"

#endif
