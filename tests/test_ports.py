"""The suite's one port helper (``tests/ports.py``): a port outside the ephemeral range, free now,
and no test module with a copy of its own (the copies drifted back to ``bind(0)``)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from tests.ports import free_port

TESTS = Path(__file__).resolve().parent
HELPER = re.compile(r"^def (free_port|closed_port)\(", re.MULTILINE)


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        port = free_port()
        assert 20000 <= port < max(low, 20001)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_no_test_module_writes_its_own_port_helper() -> None:
    copies = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
              if p.name != "ports.py" and HELPER.search(p.read_text())]
    assert copies == []
