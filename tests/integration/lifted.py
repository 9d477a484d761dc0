"""What each test_lifted_*.py shares: a suite imported whole into such a module runs with
every Stack behind the sample operator configuration (Stack.LIFTED), and a test that
says it does."""
import pytest

import stack as stack_module


@pytest.fixture(autouse=True)
def lifted(monkeypatch):
    monkeypatch.setattr(stack_module.Stack, "LIFTED", True)


def test_the_suite_runs_behind_the_operators_frontend(stack):
    assert stack.lifted
    assert stack._request(stack.gw_port, "GET", "/static/x")[::2] == (200, b"static")
