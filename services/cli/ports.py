"""Is a port free, and if not, who holds it: so a busy port stops `engram up` and
`engram serve` with one line instead of a traceback from deep inside gRPC."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

LISTEN = "0A"  # TCP state in /proc/net/tcp


def port_in_use(host: str, port: int) -> bool:
    """True when a listening socket would stop a server from binding host:port.
    SO_REUSEADDR as gRPC sets it, so a closed socket in TIME_WAIT does not count."""
    if port == 0:
        return False
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return False  # the server reports an unusable host itself
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError:
                return True
    return False


def port_holder(port: int) -> str:
    """'pid N (command line)' of the process listening on `port`, when this
    machine lets us see it (Linux /proc); otherwise 'another process'."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == LISTEN:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return "another process"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            fd_dir = f"/proc/{pid}/fd"
            if any(os.readlink(f"{fd_dir}/{fd}") in inodes for fd in os.listdir(fd_dir)):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                command = " ".join(a.decode(errors="replace") for a in argv if a)
                return f"pid {pid} ({command[:100]})"
    return "another process"
