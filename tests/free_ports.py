"""Ports for the servers a test starts in another process, which must be told a port
before it binds (an in-process server binds port 0 instead)."""

from __future__ import annotations

import socket

_handed_out: set[int] = set()


def free_port() -> int:
    """A port nobody listens on now and that this test run has not handed out before.

    The kernel may give the same ephemeral port to two binds in a row once the first
    socket has closed, so a suite's five ports picked one after another could coincide
    (CI once saw maintenance and the store's internal listener both get 55491)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
