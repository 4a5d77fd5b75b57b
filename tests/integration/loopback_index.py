"""pypiserver over a wheel directory on a free loopback port, for the tests that install
through a real package index server (test_index, test_index_follows_publish, test_team_wheels)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def pypiserver(directory: Path, ready_page: str = "") -> Iterator[str]:
    """Serve ``directory`` (no fallback to PyPI, no authentication) and yield its simple-index
    URL once ``ready_page`` (a project's page, or the root) answers; stopped afterwards."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "--host", "127.0.0.1", "--port", str(port),
         "--disable-fallback", "--authenticate", ".", "--passwords", ".", str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + ready_page, timeout=2) as response:
                    response.read()
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"pypiserver stopped: {server.stdout.read()}")
                time.sleep(0.2)
        else:
            pytest.fail(f"pypiserver did not answer on {url}")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
