"""The one way tests pick a port for a server that binds it later (a child process, a thread)."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on, below Linux's ephemeral range. A server process binds it
    only after its imports (a minute or more on a busy machine); a port from ``bind(0)`` is taken from
    the ephemeral range, where it may meanwhile become the local end of an outgoing connection
    (another test's, running in parallel), and the server then fails to start."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(20000, max(low, 20001))
        with socket.socket() as sock:
            with contextlib.suppress(OSError):
                sock.bind(("127.0.0.1", port))
                return port
