"""test_errors's suite through an operator's own HAProxy configuration (see
test_lifted_gateway.py): HAProxy's own answers still come in the API's JSON shape with the
gateway's request id when the operator's frontend hands the request over."""
from lifted import lifted, test_the_suite_runs_behind_the_operators_frontend  # noqa: F401
from test_errors import *  # noqa: F401,F403 (the suite, collected again here)
