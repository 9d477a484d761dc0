"""test_gateway's suite through an operator's own HAProxy configuration: every Stack runs
tests/integration/operator/haproxy.cfg with docs/haproxy-integration.md's diff applied,
then tally.cfg (and demo.cfg's mock providers); clients reach the operator's frontend,
which hands /v1/ to tally's gateway frontend on an abstract socket."""
from lifted import lifted, test_the_suite_runs_behind_the_operators_frontend  # noqa: F401
from test_gateway import *  # noqa: F401,F403 (the suite, collected again here)
