"""loadtest/cluster-report.py: the figures of perf.sh's cluster stages, from the JSON
levels tally-stress wrote, the agents' /metrics scraped before and after a run, and the
rows in PostgreSQL (read with psql). Run by perf.sh, one subcommand per report:

  scale DIR NODES...      req/s and events/s of each node count against the first, the
                          accounting of each, and decision latency (unlimited key);
                          exit 1 if a run had errors or inexact accounting
  limits DIR RUN NODES URL SCOPE NAME
                          one limits run (its files named by RUN) through NODES nodes,
                          of the key NAME (SCOPE key) or of the team NAME's rows (SCOPE
                          team; its keys NAME-1..NAME-NODES, key j sent to the j-th
                          gateway alone): admitted per calendar minute since the run's
                          first request and over every sliding 60 s span, the most in
                          flight at once (at the mock, and from the rows' start and end),
                          against PERF_RPM_BOUND and PERF_CONC_BOUND, and each key's
                          admitted rows against what its gateways answered; writes
                          DIR/limits-RUN.result.json
  verdict DIR RUN...      the limits runs side by side; exit 1 if any broke a bound
  outage DIR NODES URL KEY_NAME T_STOP T_START
                          the outage run: admitted (rows) and most in flight (the mock's
                          streams sampled, and rows' spans) before the store was stopped (unix ms
                          T_STOP), while it was lost, and after it started again
                          (T_START), each against its bound; exit 1 if one is broken

DIR holds, per node count N, cluster-N-unary.json and cluster-N-streams.json, and per
limits run RUN (N, or team-N) limits-RUN.json (tally-stress --json) and
mock-limits-RUN.json (the mock's /_mock/stats after the run); metrics-NAME-X.before /
.after are every agent's /metrics, concatenated (NAME unary, X a node count; NAME
limits, X a RUN)."""
import json
import os
import subprocess
import sys

RPM_CAP, CONC_CAP = 60, 4


def level(path):
    """The one level of a tally-stress --json file."""
    with open(path) as f:
        return json.loads(f.readline())


def buckets(path):
    """tally_decision_seconds as {upper bound (s): cumulative count}, summed over nodes."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("tally_decision_seconds_bucket{le=\""):
                le = line.split('"')[1]
                bound = float("inf") if le == "+Inf" else float(le)
                out[bound] = out.get(bound, 0) + int(line.split()[-1])
    return out


def quantile(q, before, after):
    """Prometheus' histogram_quantile over the decisions made between two scrapes:
    linear inside the bucket holding the rank. Seconds, and the number of decisions."""
    bounds = sorted(after)
    cum = [after[b] - before.get(b, 0) for b in bounds]
    total = cum[-1] if cum else 0
    if total == 0:
        return float("nan"), 0
    rank = q * total
    lower, below = 0.0, 0
    for b, c in zip(bounds, cum):
        if c >= rank:
            if b == float("inf"):
                return lower, total
            return lower + (b - lower) * (rank - below) / max(c - below, 1), total
        lower, below = b, c
    return lower, total


def latency(d, name, n):
    before = buckets(f"{d}/metrics-{name}-{n}.before")
    after = buckets(f"{d}/metrics-{name}-{n}.after")
    p50, count = quantile(0.50, before, after)
    p99, _ = quantile(0.99, before, after)
    return p50 * 1e3, p99 * 1e3, count


def accounting(lv):
    a = lv.get("accounting")
    if a is None:
        return "not checked"
    nodes = ", ".join(f"{x['node']} {x['written_level']}" for x in a["nodes"])
    state = "exact" if a["exact"] else "NOT EXACT"
    return (f"{state}: {a['rows']}/{a['expected']} rows, dropped {a['dropped']}, "
            f"every node balanced: {'yes' if a['nodes_balanced'] else 'NO'} (rows by node: {nodes})")


def cmd_scale(d, nodes):
    base = nodes[0]
    u0, s0 = level(f"{d}/cluster-{base}-unary.json"), level(f"{d}/cluster-{base}-streams.json")
    print(f"[cluster] the same clients spread evenly over every node's gateway "
          f"({u0['connections']} unary, {s0['connections']} streams)")
    print(f"{'nodes':>5} {'req/s':>9} {'ratio':>6} {'events/s':>10} {'ratio':>6} "
          f"{'decide p50 ms':>13} {'p99 ms':>7}  accounting")
    lat1, failed = None, False
    for n in nodes:
        u, s = level(f"{d}/cluster-{n}-unary.json"), level(f"{d}/cluster-{n}-streams.json")
        p50, p99, _ = latency(d, "unary", n)
        lat1 = lat1 or (p50, p99)
        ok = (u.get("accounting", {}).get("exact") and s.get("accounting", {}).get("exact"))
        errors = u["errors"]["total"] + s["errors"]["total"]
        failed |= not ok or errors > 0
        print(f"{n:5d} {u['requests_per_s']:9.1f} {u['requests_per_s'] / u0['requests_per_s']:5.2f}x "
              f"{s['events_per_s']:10.1f} {s['events_per_s'] / s0['events_per_s']:5.2f}x "
              f"{p50:13.3f} {p99:7.3f}  {'exact' if ok else 'NOT EXACT'}"
              + (f", {errors} errors" if errors else ""))
    for n in nodes:
        for kind in ("unary", "streams"):
            lv = level(f"{d}/cluster-{n}-{kind}.json")
            print(f"  {n} node(s), {kind}: {accounting(lv)}")
    for n in nodes[1:]:
        p50, p99, _ = latency(d, "unary", n)
        print(f"  decision latency, key without limits, {n} nodes / {base}: "
              f"p50 {p50 / lat1[0]:.2f}x, p99 {p99 / lat1[1]:.2f}x")
    return 1 if failed else 0


def psql_rows(url, sql):
    out = subprocess.run(["psql", "-X", "-q", "-At", "-F", " ", "-v", "ON_ERROR_STOP=1",
                          "-d", url, "-c", sql], capture_output=True, text=True, check=True)
    return [line.split() for line in out.stdout.splitlines() if line]


def sliding_max(starts, span_ms=60000):
    """The most starts in any span of span_ms (the max is reached at some start)."""
    best, j = 0, 0
    for i, s in enumerate(starts):
        while starts[j] <= s - span_ms:
            j += 1
        best = max(best, i - j + 1)
    return best


def most_in_flight(spans):
    """The most [start, end) spans open at once; an end at t closes before a start at t."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


def cmd_limits(d, run, n, url, scope, name):
    rpm_bound = int(os.environ.get("PERF_RPM_BOUND", 2 * RPM_CAP + 3))
    conc_bound = int(os.environ.get("PERF_CONC_BOUND", CONC_CAP))
    where = (f"k.name = '{name}'" if scope == "key" else
             f"r.team_id = (SELECT id FROM teams WHERE name = '{name}')")
    rows = psql_rows(url, f"SELECT r.verdict, r.started_at, coalesce(r.duration_ms, 0), k.name "
                          f"FROM requests r JOIN keys k ON k.id = r.key_id "
                          f"WHERE {where} ORDER BY r.started_at")
    admitted = [(int(s), int(s) + int(dur)) for v, s, dur, _ in rows if v == "allow"]
    starts = [s for s, _ in admitted]
    lv = level(f"{d}/limits-{run}.json")
    # Each key's admitted rows against what its gateways answered: a team's key j went
    # to the j-th gateway alone, a key to all of them.
    if scope == "key":
        members = [(name, sum(lv["ok_by_url"]))]
    else:
        members = [(f"{name}-{j + 1}", ok) for j, ok in enumerate(lv["ok_by_url"])]
    per_key = [(k, sum(v == "allow" and kn == k for v, _, _, kn in rows), ok)
               for k, ok in members]
    keys_ok = all(got == ok for _, got, ok in per_key)
    # every client starts at once: the first row (admitted or not) is the run's start,
    # the last its end
    t0 = int(rows[0][1]) if rows else 0
    end = int(rows[-1][1]) + 1 if rows else 1
    minutes = []
    for m in range(0, max(end - t0, 1), 60000):
        lo, hi = t0 + m, min(t0 + m + 60000, end)
        minutes.append((m // 1000, (hi - lo) / 1000, sum(lo <= s < hi for s in starts)))
    slide = sliding_max(starts)
    with open(f"{d}/mock-limits-{run}.json") as f:
        conc = json.load(f)["answering_max"]
    conc_rows = most_in_flight(admitted)
    p50, p99, decisions = latency(d, "limits", run)
    requests = lv["requests"]
    what = (f"key --rpm {RPM_CAP} --max-concurrent {CONC_CAP}" if scope == "key" else
            f"team --rpm {RPM_CAP} --max-concurrent {CONC_CAP} of {len(members)} keys "
            f"without limits, one per gateway")
    print(f"[limits, {n} node(s)] {what}: "
          f"{lv['connections']} clients over {n} gateway(s) for {lv['elapsed_s']:.0f} s")
    print(f"  requests {requests}: admitted {len(admitted)} (answered {lv['ok']}), "
          f"refused {lv['refused']}, errors {lv['errors']['total']}; rows of the {scope} "
          f"{len(rows)} ({'one per request' if len(rows) == requests else 'NOT one per request'})")
    print("  admitted per key = answered through its gateway(s): " + ", ".join(
        f"{k} {got}/{ok}" for k, got, ok in per_key) + ("" if keys_ok else " DIFFERENT")
        + f"; answered by gateway: {', '.join(map(str, lv['ok_by_url']))}")
    print("  admitted per minute since start: " + ", ".join(
        f"{a}-{a + w:.0f} s: {c}" + ("" if w == 60 else f" (in {w:.0f} s)") for a, w, c in minutes))
    rpm_ok, conc_ok = slide <= rpm_bound, conc <= conc_bound
    print(f"  admitted in any sliding 60 s: at most {slide} (cap {RPM_CAP}, bound {rpm_bound}) "
          f"{'PASS' if rpm_ok else 'FAIL'}")
    # A row's span starts at HAProxy's accept, before the decision: a request accepted a
    # millisecond before another ended, admitted after, overlaps it in the rows only.
    print(f"  in flight at once, all nodes: at most {conc} at the upstream (cap {CONC_CAP}, "
          f"bound {conc_bound}) {'PASS' if conc_ok else 'FAIL'}; rows' spans, accept to "
          f"last byte: {conc_rows}")
    print(f"  decision latency: p50 {p50:.3f} ms, p99 {p99:.3f} ms ({decisions} decisions)")
    result = {"run": run, "scope": scope, "nodes": n, "admitted": len(admitted),
              "per_minute": minutes, "sliding_max": slide, "in_flight_max": conc,
              "in_flight_rows": conc_rows, "rpm_bound": rpm_bound, "conc_bound": conc_bound,
              "pass": rpm_ok and conc_ok and keys_ok and len(rows) == requests,
              "p50_ms": p50, "p99_ms": p99}
    with open(f"{d}/limits-{run}.result.json", "w") as f:
        json.dump(result, f)


def ratios(r, base):
    return (f"admitted in 60 s {r['sliding_max'] / max(base['sliding_max'], 1):.2f}x, in flight "
            f"{r['in_flight_max'] / max(base['in_flight_max'], 1):.2f}x, decision latency "
            f"p50 {r['p50_ms'] / base['p50_ms']:.2f}x, p99 {r['p99_ms'] / base['p99_ms']:.2f}x")


def cmd_verdict(d, runs):
    res = [json.load(open(f"{d}/limits-{run}.result.json")) for run in runs]
    base = res[0]
    print(f"[limits] {'limited':>7} {'nodes':>5} {'max/60 s':>8} {'in flight':>9} {'p50 ms':>7} "
          f"{'p99 ms':>7}  result")
    for r in res:
        print(f"         {r['scope']:>7} {r['nodes']:5d} {r['sliding_max']:8d} "
              f"{r['in_flight_max']:9d} {r['p50_ms']:7.3f} {r['p99_ms']:7.3f}  "
              f"{'PASS' if r['pass'] else 'FAIL'}")
    for r in res[1:]:
        print(f"  {r['scope']}, {r['nodes']} nodes / {base['scope']}, {base['nodes']}: "
              f"{ratios(r, base)}")
    keys = {r["nodes"]: r for r in res if r["scope"] == "key"}
    for r in res:
        if r["scope"] == "team" and r["nodes"] in keys and keys[r["nodes"]] is not base:
            print(f"  team / key, {r['nodes']} nodes: {ratios(r, keys[r['nodes']])}")
    failed = [f"{r['scope']} on {r['nodes']} node(s)" for r in res if not r["pass"]]
    print(f"limits: {'FAIL: ' + ', '.join(failed) if failed else 'PASS'}"
          f" (bounds: {res[0]['rpm_bound']} per 60 s, {res[0]['conc_bound']} in flight)")
    return 1 if failed else 0


def ceil_div(a, b):
    return -(-a // b)


def cmd_outage(d, n, url, key_name, t_stop, t_start):
    """Bounds (docs/limits.md, "Shared limits"): in flight at most max-concurrent in every
    phase (slots held and in flight survive the fallback and count in the leases); rpm
    on the pool N + ceil(N T / 60 s) + n L in a phase of T, and while the store is lost
    the grants held (n L) plus each node's local bucket, ceil(N / n) + its refill."""
    L = max(1, ceil_div(RPM_CAP * 200, 60000))
    share = ceil_div(RPM_CAP, n)
    rows = psql_rows(url, f"SELECT r.verdict, r.started_at, coalesce(r.duration_ms, 0) "
                          f"FROM requests r JOIN keys k ON k.id = r.key_id "
                          f"WHERE k.name = '{key_name}' ORDER BY r.started_at")
    admitted = [(int(s), int(s) + int(dur)) for v, s, dur in rows if v == "allow"]
    t0 = int(rows[0][1]) if rows else t_stop
    end = int(rows[-1][1]) + 1 if rows else t_start
    with open(f"{d}/mock-limits-outage.json") as f:
        mock_most = json.load(f)["answering_max"]
    with open(f"{d}/outage-in-flight.txt") as f:
        samples = [tuple(map(int, line.split())) for line in f if len(line.split()) == 2]
    failed = False
    print(f"[limits, outage] key --rpm {RPM_CAP} --max-concurrent {CONC_CAP} through {n} "
          f"nodes; PostgreSQL stopped {(t_stop - t0) / 1000:.1f} s into the run for "
          f"{(t_start - t_stop) / 1000:.1f} s")
    # In flight: the mock's streams sampled every 50 ms; the rows' spans (accept to last
    # byte) overlap more, a request accepted before another ended and admitted after.
    print(f"  {'phase':8} {'span s':>6} {'admitted':>8} {'bound':>6} {'in flight':>9} "
          f"{'bound':>5} {'rows':>4}  result")
    for name, lo, hi in (("before", t0, t_stop), ("outage", t_stop, t_start),
                         ("after", t_start, end)):
        span = max(hi - lo, 0)
        got = sum(lo <= s < hi for s, _ in admitted)
        if name == "outage":
            bound = n * L + n * (share + ceil_div(share * span, 60000))
        else:
            bound = RPM_CAP + ceil_div(RPM_CAP * span, 60000) + n * L
        rows_most = most_in_flight([(max(s, lo), min(e, hi)) for s, e in admitted
                                    if s < hi and e > lo])
        most = max([c for t, c in samples if lo <= t < hi], default=0)
        ok = got <= bound and most <= CONC_CAP
        failed |= not ok
        print(f"  {name:8} {span / 1000:6.1f} {got:8d} {bound:6d} {most:9d} {CONC_CAP:5d} "
              f"{rows_most:4d}  {'PASS' if ok else 'FAIL'}")
    ok = mock_most <= CONC_CAP
    failed |= not ok
    print(f"  in flight at the upstream, whole run: at most {mock_most} (bound {CONC_CAP}) "
          f"{'PASS' if ok else 'FAIL'}; rows of the key {len(rows)}")
    print(f"limits, outage: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


def main(argv):
    cmd, d = argv[1], argv[2]
    if cmd == "scale":
        return cmd_scale(d, [int(n) for n in argv[3:]])
    elif cmd == "limits":
        cmd_limits(d, argv[3], int(argv[4]), argv[5], argv[6], argv[7])
    elif cmd == "verdict":
        return cmd_verdict(d, argv[3:])
    elif cmd == "outage":
        return cmd_outage(d, int(argv[3]), argv[4], argv[5], int(argv[6]), int(argv[7]))
    else:
        sys.exit(f"cluster-report: unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
