"""tally added to an operator's own HAProxy configuration as docs/haproxy-integration.md
says ("Adding tally to your HAProxy"): tests/integration/operator/haproxy.cfg, a typical
one with a TLS frontend and its own ACLs and backends, patched with the guide's diff and
loaded before tally.cfg. The gateway suites run through it in test_lifted_gateway.py;
here, that the diff stays short and valid and that the operator's own routes, TLS and
HTTP/2 keep working beside the gateway."""
import json
import re
import subprocess
import time

import pytest

import stack as stack_module
from conftest import HAPROXY, ROOT
from lift import OPERATOR_CFG, apply_diff, integration_diff
from stack import Stack, lifted_operator_cfg, make_cert
from test_gateway import REQUEST_ID

@pytest.fixture
def stack(tmp_path, monkeypatch):
    monkeypatch.setattr(stack_module.Stack, "LIFTED", True)
    s = Stack(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.close()


def test_the_diff_is_short_and_only_adds():
    diff = integration_diff()
    added = [l for l in diff.splitlines() if l.startswith("+")]
    removed = [l for l in diff.splitlines() if l.startswith("-")]
    assert 0 < len(added) < 40 and not removed, (len(added), removed)
    # The guide's count is the diff's.
    doc = (ROOT / "docs" / "haproxy-integration.md").read_text()
    assert f"{len(added)} lines of yours" in doc
    # A diff whose context is not in the file is refused, not applied somewhere else.
    with pytest.raises(ValueError):
        apply_diff(OPERATOR_CFG.read_text().replace("default_backend app", "default_backend web"), diff)


def test_the_lifted_configuration_is_valid_without_the_demo(tmp_path):
    """What a production HAProxy loads: the operator's file, then tally.cfg alone."""
    env = {
        "PATH": "/usr/sbin:/usr/bin:/bin",
        "OP_HTTP_ADDR": "127.0.0.1:1", "OP_TLS_ADDR": "127.0.0.1:2",
        "OP_TLS_CERT": str(make_cert(tmp_path)), "OP_RUN_DIR": str(tmp_path),
        "TALLY_GATEWAY_ADDR": "abns@tally-gateway-check",
        "TALLY_AGENT_ADDR": "127.0.0.1:3", "TALLY_RECORDS_ADDR": "127.0.0.1:4",
        "TALLY_HAPROXY_DIR": str(ROOT / "haproxy"),
        "TALLY_SPOE_CONF": str(ROOT / "haproxy" / "spoe-tally.conf"),
        "TALLY_RUN_DIR": str(tmp_path), "TALLY_FAIL_POLICY": "closed",
        "TALLY_FAILOPEN_BACKEND": "be_no_route", "TALLY_GATEWAY_SECRET": "g" * 43,
    }
    r = subprocess.run([HAPROXY, "-c", "-f", str(lifted_operator_cfg(tmp_path)),
                        "-f", str(ROOT / "haproxy" / "tally.cfg")],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "WARNING" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_operator_routes_stay_theirs(stack):
    assert stack._request(stack.gw_port, "GET", "/")[::2] == (200, b"app")
    assert stack._request(stack.gw_port, "GET", "/static/logo.png")[::2] == (200, b"static")
    assert stack._request(stack.gw_port, "GET", "/private/x")[0] == 403
    assert stack._request(stack.gw_port, "GET", "/admin/")[::2] == (200, b"app")  # internal
    # /v1/ is tally's: a request without a key gets the API's JSON error, from the agent.
    status, hdrs, body = stack._request(stack.gw_port, "POST", "/v1/chat/completions",
                                        json.dumps({"model": "mock-gpt", "messages": []}).encode(),
                                        {"Content-Type": "application/json"})
    assert status == 401 and json.loads(body)["error"]["code"], body
    assert REQUEST_ID.match(hdrs["x-request-id"]), hdrs
    assert stack.row(hdrs["x-request-id"])["verdict"] == "missing_api_key"
    # So is /tally/: a key's own usage is answered by the agent behind the operator's
    # frontend too.
    key = stack.create_key("k", "--default-model", "mock-gpt")
    time.sleep(0.6)
    status, _, body = stack.gateway("GET", "/tally/v1/usage", key=key)
    assert status == 200 and json.loads(body)["key"]["name"] == "k", body


def test_http2_over_the_operators_tls_is_decided_and_accounted(stack):
    body = json.dumps({"model": "mock-gpt", "max_tokens": 50, "messages": []})
    r = subprocess.run(["curl", "-sk", "--http2", "-o", "-", "-D", "-", "-w", "\n%{http_version}",
                        f"https://localhost:{stack.op_tls_port}/v1/chat/completions",
                        "-H", f"Authorization: Bearer {stack.key}",
                        "-H", "Content-Type: application/json", "-d", body],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("\n2") and r.stdout.startswith("HTTP/2 200"), r.stdout
    rid = re.search(r"^x-request-id: (\S+)", r.stdout, re.M | re.I).group(1)
    row = stack.row(rid)
    assert row["status"] == 200 and row["outcome"] == "complete"
    assert row["prompt_tokens"] is not None and row["completion_tokens"] is not None
    # The provider never sees the gateway key, over this path either.
    assert stack.key not in json.dumps(stack.mock_requests())


class ShortClientTimeout(Stack):
    """The lifted stack with the operator's timeout client at 2 s: shorter than a
    completion's wait for its first byte."""

    def haproxy_files(self):
        files = super().haproxy_files()
        op = self.tmp / "operator.cfg"
        text = op.read_text()
        assert "timeout client 60s" in text
        short = self.tmp / "operator-short.cfg"
        short.write_text(text.replace("timeout client 60s", "timeout client 2s"))
        return [str(short) if f == str(op) else f for f in files]


def test_a_slow_first_byte_outlives_the_operators_client_timeout(tmp_path, monkeypatch):
    """The diff leaves the operator's timeout client alone: while the request waits for
    the provider's first byte, timeout server (the diff's 11 minutes) is what runs."""
    monkeypatch.setattr(stack_module.Stack, "LIFTED", True)
    s = ShortClientTimeout(tmp_path)
    try:
        s.start()
        body = {"model": "mock-gpt", "max_tokens": 20, "messages": []}
        status, hdrs, got = s.gateway("POST", "/v1/chat/completions", body, key=s.key,
                                      headers={"x-mock-ttfb-ms": "4000"})
        assert status == 200, got
        assert s.row(hdrs["x-request-id"])["outcome"] == "complete"
    finally:
        s.close()
