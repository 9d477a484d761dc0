-- wrk script for loadtest/bench-decision.sh: one unary chat completion with a 1 KB
-- response, then a machine-readable summary line.
wrk.method = "POST"
wrk.body = '{"model":"mock-gpt","messages":[{"role":"user","content":"Say hello in one short sentence."}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("TALLY_KEY") or "none")
wrk.headers["x-mock-body-bytes"] = os.getenv("BENCH_BODY_BYTES") or "1024"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d errors=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
