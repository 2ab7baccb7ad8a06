"""bench.peers: Portkey's gateway, the latency bench's second peer, relays to the bench's upstream and
listens on this machine only."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import psutil
import pytest

from bench import peers
from bench.gateway_latency import free_port, stop
from tests.gateway.fake_upstream import FakeUpstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def portkey() -> Iterator[tuple[psutil.Process, int]]:
    port = free_port()
    try:
        proc = peers.start_portkey(port)
    except peers.PeerUnavailable as reason:
        if "not found" in str(reason):
            pytest.skip(str(reason))
        raise
    yield psutil.Process(proc.pid), port
    stop(proc, 10)


def test_portkey_relays_a_chat_request_to_the_upstream_its_headers_name(
        upstream: FakeUpstream, portkey: tuple[psutil.Process, int]) -> None:
    messages = [{"role": "user", "content": "Say hello in one word."}]
    answer = httpx.post(f"http://127.0.0.1:{portkey[1]}/v1/chat/completions", timeout=30,
                        json={"model": "echo", "messages": messages},
                        headers=peers.portkey_headers(upstream.base_url))
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    assert [r.json["messages"] for r in upstream.received("echo")] == [messages]


def test_portkey_listens_on_the_loopback_address_only(portkey: tuple[psutil.Process, int]) -> None:
    # Its start-server listens on every interface; bench/loopback.cjs keeps it on 127.0.0.1.
    listening = {c.laddr for c in portkey[0].net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    assert listening == {("127.0.0.1", portkey[1])}
    with socket.socket(socket.AF_INET6) as other, pytest.raises(OSError):
        other.settimeout(2)
        other.connect(("::1", portkey[1]))
