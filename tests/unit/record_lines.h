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
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c1 s 12" \
	"62 1261 0 data: {\"id\":\"chatcmpl-mock3cc46bbbdd0c59b2\",\"object\":\"chat.completi" \
	"on.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp" \
	"_mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"mo" \
	"ck0 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"" \
	"chatcmpl-mock3cc46bbbdd0c59b2\",\"object\":\"chat.completion.chunk\",\"created\":170" \
	"0000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"in" \
	"dex\":0,\"delta\":{\"content\":\"mock1 \"},\"logprobs\":null,\"finish_reason\":null}" \
	"],\"usage\":null}  data: {\"id\":\"chatcmpl-mock3cc46bbbdd0c59b2\",\"object\":\"chat" \
	".completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerpri" \
	"nt\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock2 \"},\"logp" \
	"robs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock3" \
	"cc46bbbdd0c59b2\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"mode" \
	"l\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delt" \
	"a\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}  data: {\"id\"" \
	":\"chatcmpl-mock3cc46bbbdd0c59b2\",\"object\":\"chat.completion.chunk\",\"created\":" \
	"1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[]," \
	"\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}  data:" \
	" [DONE]  "

/* stream with cache read and creation */
#define REAL_ANTHROPIC_STREAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b3477547-3a52-422f-9350-6f3926e642de 1796278643 563 200 391 1172 0 0 0 0 0 --" \
	" be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - " \
	"- c1 s 1064 1063 0 event: message_start data: {\"type\":\"message_start\",\"message" \
	"\":{\"id\":\"msg_mock70c27fe9a3ed4b96\",\"type\":\"message\",\"role\":\"assistant\"," \
	"\"model\":\"mock-claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null" \
	",\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":2000,\"cache_read_i" \
	"nput_tokens\":1000,\"output_tokens\":1}}}  event: content_block_start data: {\"type" \
	"\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\"" \
	":\"\"}}  event: content_block_delta data: {\"type\":\"content_block_delta\",\"index" \
	"\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock0 \"}}  event: content_block_" \
	"delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text" \
	"_delta\",\"text\":\"mock1 \"}}  event: content_block_delta data: {\"type\":\"content" \
	"_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock2 \"}} " \
	" event: content_block_stop data: {\"type\":\"content_block_stop\",\"index\":0}  even" \
	"t: message_delta data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_" \
	"turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":40}}  event: message_sto" \
	"p data: {\"type\":\"message_stop\"}  "

/* unary message, usage read by json_query */
#define REAL_ANTHROPIC_UNARY \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b0ba04d8-3598-4e70-993e-d304a377e336 1796278643 564 200 279 362 0 0 0 0 0 -- " \
	"be_mock_anthropic allow 1 mock-claude mock-anthropic 0 - - mock-claude - - - - 100 2" \
	"0 - - -"

/* 200-frame stream: head, gap, tail */
#define REAL_OPENAI_LONG_STREAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 9bcf265f-e389-4161-bf8b-e7a0aced3c04 1796278643 566 200 324 51504 0 0 0 0 1 -" \
	"- be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c1 s 5" \
	"1396 1536 3072 data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.com" \
	"pletion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\"" \
	":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\"" \
	":\"mock0 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id" \
	"\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created" \
	"\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":" \
	"[{\"index\":0,\"delta\":{\"content\":\"mock1 \"},\"logprobs\":null,\"finish_reason\"" \
	":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":" \
	"\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fin" \
	"gerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock2 \"}," \
	"\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl" \
	"-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
	"\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0," \
	"\"delta\":{\"content\":\"mock3 \"},\"logprobs\":null,\"finish_reason\":null}],\"usag" \
	"e\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.complet" \
	"ion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"f" \
	"p_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock4 \"},\"logprobs\":n" \
	"ull,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95" \
	"f371b92\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mo" \
	"ck-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"c" \
	"ontent\":\"mock5 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null} inis" \
	"h_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\"," \
	"\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\"," \
	"\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":" \
	"\"mock190 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"i" \
	"d\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created" \
	"\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":" \
	"[{\"index\":0,\"delta\":{\"content\":\"mock191 \"},\"logprobs\":null,\"finish_reason" \
	"\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object" \
	"\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_" \
	"fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock192" \
	" \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"cha" \
	"tcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created\":170000" \
	"0000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index" \
	"\":0,\"delta\":{\"content\":\"mock193 \"},\"logprobs\":null,\"finish_reason\":null}]" \
	",\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat." \
	"completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprin" \
	"t\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock194 \"},\"log" \
	"probs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock" \
	"34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"mod" \
	"el\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"del" \
	"ta\":{\"content\":\"mock195 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\"" \
	":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion" \
	".chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_m" \
	"ock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock196 \"},\"logprobs\":nu" \
	"ll,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f" \
	"371b92\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"moc" \
	"k-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"co" \
	"ntent\":\"mock197 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  da" \
	"ta: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\"," \
	"\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"c" \
	"hoices\":[{\"index\":0,\"delta\":{\"content\":\"mock198 \"},\"logprobs\":null,\"fini" \
	"sh_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\"," \
	"\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\"," \
	"\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":" \
	"\"mock199 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"i" \
	"d\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion.chunk\",\"created" \
	"\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":" \
	"[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":" \
	"null}  data: {\"id\":\"chatcmpl-mock34eaece95f371b92\",\"object\":\"chat.completion." \
	"chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mo" \
	"ck\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":200,\"tota" \
	"l_tokens\":212}}  data: [DONE]  "

/* upstream cut before the Lua filter saw a byte: no capture */
#define REAL_ANTHROPIC_CUT_NO_CAPTURE \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b29c2e7d-3c3e-4454-a927-a872a0742c68 1796278643 568 200 298 1085 2 0 0 0 2 SD" \
	" be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - - " \
	"- -"

/* client gone after 3 frames */
#define REAL_OPENAI_CLIENT_ABORT \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " b50460c9-10a3-410d-aabe-ac6c8ebcd9db 1796278643 571 200 296 1392 0 0 0 0 101 " \
	"CD be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c1 s " \
	"1284 1284 0 data: {\"id\":\"chatcmpl-mock93d9e00eddfcdba4\",\"object\":\"chat.comple" \
	"tion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"" \
	"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"" \
	"mock0 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":" \
	"\"chatcmpl-mock93d9e00eddfcdba4\",\"object\":\"chat.completion.chunk\",\"created\":1" \
	"700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"" \
	"index\":0,\"delta\":{\"content\":\"mock1 \"},\"logprobs\":null,\"finish_reason\":nul" \
	"l}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock93d9e00eddfcdba4\",\"object\":\"ch" \
	"at.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerp" \
	"rint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock2 \"},\"lo" \
	"gprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-moc" \
	"k93d9e00eddfcdba4\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"mo" \
	"del\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"de" \
	"lta\":{\"content\":\"mock3 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":" \
	"null}  data: {\"id\":\"chatcmpl-mock93d9e00eddfcdba4\",\"object\":\"chat.completion." \
	"chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mo" \
	"ck\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock4 \"},\"logprobs\":null," \
	"\"finish_reason\":null}],\"usage\":null}  "

/* upstream cut after message_start and 5 frames (x-mock-cached-tokens 7) */
#define REAL_ANTHROPIC_CUT \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " e29673c1-3dc0-45b6-8aab-9a4ffa400797 1796278899 249 200 341 1145 3 0 0 3 21 S" \
	"D be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - -" \
	" - c1 s 916 916 0 event: message_start data: {\"type\":\"message_start\",\"message\"" \
	":{\"id\":\"msg_mock2913b7f99159e290\",\"type\":\"message\",\"role\":\"assistant\",\"" \
	"model\":\"mock-claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null," \
	"\"usage\":{\"input_tokens\":100,\"cache_creation_input_tokens\":0,\"cache_read_input" \
	"_tokens\":7,\"output_tokens\":1}}}  event: content_block_start data: {\"type\":\"con" \
	"tent_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}} " \
	" event: content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"de" \
	"lta\":{\"type\":\"text_delta\",\"text\":\"mock0 \"}}  event: content_block_delta dat" \
	"a: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\"," \
	"\"text\":\"mock1 \"}}  event: content_block_delta data: {\"type\":\"content_block_de" \
	"lta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock2 \"}}  event: c" \
	"ontent_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"" \
	"type\":\"text_delta\",\"text\":\"mock3 \"}}  "

/* upstream cut after 150 of 200 frames: message_start in the head, no message_delta in the tail */
#define REAL_ANTHROPIC_CUT_LONG \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " a514f36d-e9d4-43ce-b1e8-d53fa1162dfe 1796278899 272 200 323 18820 1 0 1 0 175" \
	" SD be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - -" \
	" - - c1 s 18589 1536 3072 event: message_start data: {\"type\":\"message_start\",\"m" \
	"essage\":{\"id\":\"msg_mock7e4f7d096561be4d\",\"type\":\"message\",\"role\":\"assist" \
	"ant\",\"model\":\"mock-claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence" \
	"\":null,\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}  event: content_block" \
	"_start data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type" \
	"\":\"text\",\"text\":\"\"}}  event: content_block_delta data: {\"type\":\"content_bl" \
	"ock_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock0 \"}}  ev" \
	"ent: content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta" \
	"\":{\"type\":\"text_delta\",\"text\":\"mock1 \"}}  event: content_block_delta data: " \
	"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"t" \
	"ext\":\"mock2 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta" \
	"\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock3 \"}}  event: cont" \
	"ent_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"typ" \
	"e\":\"text_delta\",\"text\":\"mock4 \"}}  event: content_block_delta data: {\"type\"" \
	":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"m" \
	"ock5 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta\",\"inde" \
	"x\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock6 \"}}  event: content_block" \
	"_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"tex" \
	"t_delta\",\"text\":\"mock7 \"}}  event: content_block_delta data: {\"type\":\"conten" \
	"t_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock8 \"}}" \
	"  event: content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"d" \
	"nt: content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta" \
	"\":{\"type\":\"text_delta\",\"text\":\"mock124 \"}}  event: content_block_delta data" \
	": {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\"," \
	"\"text\":\"mock125 \"}}  event: content_block_delta data: {\"type\":\"content_block_" \
	"delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock126 \"}}  even" \
	"t: content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\"" \
	":{\"type\":\"text_delta\",\"text\":\"mock127 \"}}  event: content_block_delta data: " \
	"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"t" \
	"ext\":\"mock128 \"}}  event: content_block_delta data: {\"type\":\"content_block_del" \
	"ta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock129 \"}}  event: " \
	"content_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{" \
	"\"type\":\"text_delta\",\"text\":\"mock130 \"}}  event: content_block_delta data: {" \
	"\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"te" \
	"xt\":\"mock131 \"}}  event: content_block_delta data: {\"type\":\"content_block_delt" \
	"a\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock132 \"}}  event: c" \
	"ontent_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"" \
	"type\":\"text_delta\",\"text\":\"mock133 \"}}  event: content_block_delta data: {\"t" \
	"ype\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text" \
	"\":\"mock134 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta" \
	"\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock135 \"}}  event: co" \
	"ntent_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"t" \
	"ype\":\"text_delta\",\"text\":\"mock136 \"}}  event: content_block_delta data: {\"ty" \
	"pe\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\"" \
	":\"mock137 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta\"," \
	"\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock138 \"}}  event: conte" \
	"nt_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type" \
	"\":\"text_delta\",\"text\":\"mock139 \"}}  event: content_block_delta data: {\"type" \
	"\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" \
	"\"mock140 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta\"," \
	"\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock141 \"}}  event: conte" \
	"nt_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type" \
	"\":\"text_delta\",\"text\":\"mock142 \"}}  event: content_block_delta data: {\"type" \
	"\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" \
	"\"mock143 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta\"," \
	"\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock144 \"}}  event: conte" \
	"nt_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type" \
	"\":\"text_delta\",\"text\":\"mock145 \"}}  event: content_block_delta data: {\"type" \
	"\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" \
	"\"mock146 \"}}  event: content_block_delta data: {\"type\":\"content_block_delta\"," \
	"\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock147 \"}}  event: conte" \
	"nt_block_delta data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type" \
	"\":\"text_delta\",\"text\":\"mock148 \"}}  "

/* 200 frames, CRLF: message_start in the head, message_delta in the tail */
#define REAL_ANTHROPIC_LONG_STREAM_CRLF \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 1f837c20-fe5d-4d0c-98e7-c2cb27a626dc 1796278899 448 200 314 25849 0 0 0 1 2 -" \
	"- be_mock_anthropic_capture allow 1 mock-claude mock-anthropic 1 - - - - - - - - - -" \
	" - c1 s 25741 1536 3072 event: message_start  data: {\"type\":\"message_start\",\"me" \
	"ssage\":{\"id\":\"msg_mock912c1ba9b88a5f91\",\"type\":\"message\",\"role\":\"assista" \
	"nt\",\"model\":\"mock-claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\"" \
	":null,\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}    event: content_block" \
	"_start  data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"typ" \
	"e\":\"text\",\"text\":\"\"}}    event: content_block_delta  data: {\"type\":\"conten" \
	"t_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock0 \"}}" \
	"    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0," \
	"\"delta\":{\"type\":\"text_delta\",\"text\":\"mock1 \"}}    event: content_block_del" \
	"ta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_d" \
	"elta\",\"text\":\"mock2 \"}}    event: content_block_delta  data: {\"type\":\"conten" \
	"t_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock3 \"}}" \
	"    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0," \
	"\"delta\":{\"type\":\"text_delta\",\"text\":\"mock4 \"}}    event: content_block_del" \
	"ta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_d" \
	"elta\",\"text\":\"mock5 \"}}    event: content_block_delta  data: {\"type\":\"conten" \
	"t_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock6 \"}}" \
	"    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0," \
	"\"delta\":{\"type\":\"text_delta\",\"text\":\"mock7 \"}}    event: content_block_del" \
	"ta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_d" \
	"elta\",\"text\":\"mock8 \"}}    event: content_block_delta  data: {\"type\":lta\",\"" \
	"text\":\"mock177 \"}}    event: content_block_delta  data: {\"type\":\"content_block" \
	"_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock178 \"}}    e" \
	"vent: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"del" \
	"ta\":{\"type\":\"text_delta\",\"text\":\"mock179 \"}}    event: content_block_delta " \
	" data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delt" \
	"a\",\"text\":\"mock180 \"}}    event: content_block_delta  data: {\"type\":\"content" \
	"_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock181 \"}" \
	"}    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0" \
	",\"delta\":{\"type\":\"text_delta\",\"text\":\"mock182 \"}}    event: content_block_" \
	"delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"tex" \
	"t_delta\",\"text\":\"mock183 \"}}    event: content_block_delta  data: {\"type\":\"c" \
	"ontent_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock1" \
	"84 \"}}    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"ind" \
	"ex\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock185 \"}}    event: content_" \
	"block_delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\"" \
	":\"text_delta\",\"text\":\"mock186 \"}}    event: content_block_delta  data: {\"type" \
	"\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" \
	"\"mock187 \"}}    event: content_block_delta  data: {\"type\":\"content_block_delta" \
	"\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock188 \"}}    event: " \
	"content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{" \
	"\"type\":\"text_delta\",\"text\":\"mock189 \"}}    event: content_block_delta  data:" \
	" {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"" \
	"text\":\"mock190 \"}}    event: content_block_delta  data: {\"type\":\"content_block" \
	"_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock191 \"}}    e" \
	"vent: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"del" \
	"ta\":{\"type\":\"text_delta\",\"text\":\"mock192 \"}}    event: content_block_delta " \
	" data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delt" \
	"a\",\"text\":\"mock193 \"}}    event: content_block_delta  data: {\"type\":\"content" \
	"_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock194 \"}" \
	"}    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"index\":0" \
	",\"delta\":{\"type\":\"text_delta\",\"text\":\"mock195 \"}}    event: content_block_" \
	"delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"tex" \
	"t_delta\",\"text\":\"mock196 \"}}    event: content_block_delta  data: {\"type\":\"c" \
	"ontent_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock1" \
	"97 \"}}    event: content_block_delta  data: {\"type\":\"content_block_delta\",\"ind" \
	"ex\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"mock198 \"}}    event: content_" \
	"block_delta  data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\"" \
	":\"text_delta\",\"text\":\"mock199 \"}}    event: content_block_stop  data: {\"type" \
	"\":\"content_block_stop\",\"index\":0}    event: message_delta  data: {\"type\":\"me" \
	"ssage_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usag" \
	"e\":{\"output_tokens\":200}}    event: message_stop  data: {\"type\":\"message_stop" \
	"\"}    "

/* 3 frames, CRLF, cached 4 and reasoning 2 in the usage chunk */
#define REAL_OPENAI_STREAM_CRLF \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 08ae9c91-2940-418e-8946-93be2e4b1472 1796278899 451 200 384 1477 0 0 0 0 0 --" \
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c1 s 13" \
	"69 1368 0 data: {\"id\":\"chatcmpl-mock996d8298bcd56ef4\",\"object\":\"chat.completi" \
	"on.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp" \
	"_mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"mo" \
	"ck0 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}    data: {\"id\":" \
	"\"chatcmpl-mock996d8298bcd56ef4\",\"object\":\"chat.completion.chunk\",\"created\":1" \
	"700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"" \
	"index\":0,\"delta\":{\"content\":\"mock1 \"},\"logprobs\":null,\"finish_reason\":nul" \
	"l}],\"usage\":null}    data: {\"id\":\"chatcmpl-mock996d8298bcd56ef4\",\"object\":\"" \
	"chat.completion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt\",\"system_finge" \
	"rprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock2 \"},\"" \
	"logprobs\":null,\"finish_reason\":null}],\"usage\":null}    data: {\"id\":\"chatcmpl" \
	"-mock996d8298bcd56ef4\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
	"\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0," \
	"\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}    data:" \
	" {\"id\":\"chatcmpl-mock996d8298bcd56ef4\",\"object\":\"chat.completion.chunk\",\"cr" \
	"eated\":1700000000,\"model\":\"mock-gpt\",\"system_fingerprint\":\"fp_mock\",\"choic" \
	"es\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15," \
	"\"prompt_tokens_details\":{\"cached_tokens\":4},\"completion_tokens_details\":{\"rea" \
	"soning_tokens\":2}}}    data: [DONE]    "

/* 4 frames, a longer model name: 1593 bytes (HAProxy counts 1594), the usage chunk
 * across the head (1536 bytes) and the tail */
#define REAL_OPENAI_STREAM_SEAM \
	"tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 6ea53ed3-dcf1-450f-a44a-088ed2020720 1796279475 376 200 371 1702 0 0 0 1 1 --" \
	" be_mock_openai_capture allow 1 mock-gpt mock-openai 1 - - - - - - - - - - - c1 s 15" \
	"94 1536 57 data: {\"id\":\"chatcmpl-mock6eac4076d1101bb3\",\"object\":\"chat.complet" \
	"ion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"system_fing" \
	"erprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"" \
	"content\":\"mock0 \"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  da" \
	"ta: {\"id\":\"chatcmpl-mock6eac4076d1101bb3\",\"object\":\"chat.completion.chunk\"," \
	"\"created\":1700000000,\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"system_fingerprint\":\"" \
	"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock1 \"},\"logprobs\":" \
	"null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl-mock6eac4076" \
	"d1101bb3\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m" \
	"ock-gpt-xxxxxxxxxxxx\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{\"index\":0," \
	"\"delta\":{\"content\":\"mock2 \"},\"logprobs\":null,\"finish_reason\":null}],\"usag" \
	"e\":null}  data: {\"id\":\"chatcmpl-mock6eac4076d1101bb3\",\"object\":\"chat.complet" \
	"ion.chunk\",\"created\":1700000000,\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"system_fing" \
	"erprint\":\"fp_mock\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"mock3 \"}," \
	"\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}  data: {\"id\":\"chatcmpl" \
	"-mock6eac4076d1101bb3\",\"object\":\"chat.completion.chunk\",\"created\":1700000000," \
	"\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"system_fingerprint\":\"fp_mock\",\"choices\":[" \
	"{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":n" \
	"ull}  data: {\"id\":\"chatcmpl-mock6eac4076d1101bb3\",\"object\":\"chat.completion.c" \
	"hunk\",\"created\":1700000000,\"model\":\"mock-gpt-xxxxxxxxxxxx\",\"system_fingerpri" \
	"nt\":\"fp_mock\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens" \
	"\":20,\"total_tokens\":32}}  data: [DONE]  "

#endif
