-- wrk script for loadtest/bench-decision.sh and bench-accounting.sh: one chat
-- completion per request, then a machine-readable summary line. Unary with a
-- BENCH_BODY_BYTES response by default; with BENCH_FRAMES set, a stream of that many
-- frames, BENCH_FRAME_DELAY_MS apart, that asks for usage (BENCH_RESPONSES=1: a Responses
-- API stream, for a /v1/responses URL). BENCH_LONG=1: a 40 KB prompt
-- in the OpenAI Python SDK's order (messages, then model and stream), a stream of 10
-- frames that did not ask for usage: the body is longer than the agent's first frame,
-- so the capture filter reads it to its end and amends it, or on HAProxy 3.4 the agent
-- judges it whole from its pieces. BENCH_LONG_BYTES sets the prompt's length.
-- BENCH_END_USER: every request names that end user by the X-Tally-User header.
-- BENCH_TAGS: every request carries those tags by the X-Tally-Tags header.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("TALLY_KEY") or "none")
if (os.getenv("BENCH_END_USER") or "") ~= "" then
  wrk.headers["X-Tally-User"] = os.getenv("BENCH_END_USER")
end
if (os.getenv("BENCH_TAGS") or "") ~= "" then
  wrk.headers["X-Tally-Tags"] = os.getenv("BENCH_TAGS")
end
local frames = os.getenv("BENCH_FRAMES")
if os.getenv("BENCH_LONG") == "1" then
  wrk.body = '{"messages":[{"role":"user","content":"' .. string.rep("x", tonumber(os.getenv("BENCH_LONG_BYTES") or "40000")) .. '"}],' ..
    '"model":"mock-gpt","stream":true}'
  wrk.headers["x-mock-frames"] = "10"
elseif frames and os.getenv("BENCH_RESPONSES") == "1" then
  -- a Responses API stream (the URL names /v1/responses): usage always, in its last event
  wrk.body = '{"model":"mock-gpt","stream":true,"input":"Say hello in one short sentence."}'
  wrk.headers["x-mock-frames"] = frames
  wrk.headers["x-mock-frame-delay-ms"] = os.getenv("BENCH_FRAME_DELAY_MS") or "10"
elseif frames then
  wrk.body = '{"model":"mock-gpt","stream":true,"stream_options":{"include_usage":true},' ..
    '"messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
  wrk.headers["x-mock-frames"] = frames
  wrk.headers["x-mock-frame-delay-ms"] = os.getenv("BENCH_FRAME_DELAY_MS") or "10"
else
  -- max_tokens bounds the answer below HAProxy's buffer, so the gateway reads its usage
  -- with json_query; BENCH_UNBOUNDED=1 leaves it out (the capture filter reads it).
  local bound = os.getenv("BENCH_UNBOUNDED") == "1" and "" or '"max_tokens":256,'
  wrk.body = '{"model":"mock-gpt",' .. bound ..
    '"messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
  wrk.headers["x-mock-body-bytes"] = os.getenv("BENCH_BODY_BYTES") or "1024"
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d errors=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
