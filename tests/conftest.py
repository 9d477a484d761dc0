"""Shared fixtures: paths to the built binaries and free loopback ports.

Every process a test starts is recorded by PID and stopped on every exit path (fixture
finalizers); nothing is ever killed by name."""
import os
import pathlib
import socket

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / os.environ.get("TALLY_BUILD", "build")


def binary(name):
    path = BUILD / name
    if not path.exists():
        pytest.fail(f"{path} is not built (run make)")
    return path


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port():
    return free_port()
