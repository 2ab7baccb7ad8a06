"""Admission control: past the compression queue or the in-memory body bytes, a fast 503, never a pile-up."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MASTER_KEY
from fake_upstream import FakeUpstream
from pool_control import SHORT, Gateway, hold_switch, long_messages, wait_for

from gateway.config import ConfigError, parse_config

QUEUED = 2
BODY_LIMIT = 1_000_000
INFLIGHT_LIMIT = 1_500_000
BODY_TIMEOUT_S = 3.0
MIN_RATE = 1000  # bytes/s


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with hold_switch(tmp_path_factory.mktemp("admission")) as path:
        yield path


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, hold: Path) -> Iterator[Gateway]:
    server = Gateway(upstream.base_url, compression_workers=1, max_queued_compressions=QUEUED,
                     max_body_bytes=BODY_LIMIT, max_inflight_body_bytes=INFLIGHT_LIMIT,
                     body_timeout_s=BODY_TIMEOUT_S, min_body_bytes_per_s=MIN_RATE)
    yield server
    server.stop()


def _assert_overloaded(response_status: int, headers: dict[str, str], body: bytes) -> None:
    assert response_status == 503
    assert int(headers["retry-after"]) >= 1
    error = json.loads(body)["error"]
    assert (error["code"], error["type"]) == ("overloaded", "api_error")


def test_a_burst_of_long_prompts_past_the_queue_is_shed_and_short_ones_still_pass(
    gateway: Gateway, hold: Path
) -> None:
    hold.touch()  # the first admitted job holds the only worker: the queue fills behind it
    burst = 3 * QUEUED
    with concurrent.futures.ThreadPoolExecutor(max_workers=burst) as pool:
        replies = [pool.submit(gateway.chat, "small", long_messages(seed=i)) for i in range(burst)]
        shed = wait_for(lambda: (done := [r for r in replies if r.done()]) and len(done) >= burst - 1 - QUEUED
                        and done)
        for reply in shed:
            response = reply.result()
            _assert_overloaded(response.status_code, dict(response.headers), response.content)
        for _ in range(5):  # no compression job: never refused for the long ones' sake
            short = gateway.chat("gpt-test", SHORT)
            assert (short.status_code, short.headers["x-mixpr-action"]) == (200, "passthrough")
        assert sum(r.done() for r in replies) == burst - 1 - QUEUED  # the admitted ones still wait
        hold.unlink()
        statuses = sorted(r.result(timeout=120).status_code for r in replies)
    assert statuses == [200] * (1 + QUEUED) + [503] * (burst - 1 - QUEUED)
    assert gateway.metric('mixpr_requests_shed_total{limit="compression_queue"}') == burst - 1 - QUEUED
    after = gateway.chat("small", long_messages(seed=99))
    assert (after.status_code, after.headers["x-mixpr-action"]) == (200, "compressed")


def _start_post(gateway: Gateway, length: int | None) -> http.client.HTTPConnection:
    """A chat request whose headers are sent and whose body is not (yet)."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.server.port, timeout=30)
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("Authorization", f"Bearer {MASTER_KEY}")
    conn.putheader("Content-Type", "application/json")
    if length is None:
        conn.putheader("Transfer-Encoding", "chunked")
    else:
        conn.putheader("Content-Length", str(length))
    conn.endheaders()
    return conn


def _short_body(size: int) -> bytes:
    body = json.dumps({"model": "gpt-test", "messages": SHORT}).encode()
    return body + b" " * (size - len(body))  # JSON allows trailing whitespace


def test_bodies_past_the_inflight_limit_are_refused_as_their_bytes_arrive(gateway: Gateway) -> None:
    size = BODY_LIMIT
    first = _start_post(gateway, size)
    body = _short_body(size)
    first.send(body[:-1000])  # the gateway now holds what arrived, all but the last 1000 bytes
    wait_for(lambda: gateway.state.body_bytes.used >= size - 1000)
    # A second large body does not fit beside it: refused once its bytes would go over.
    second = _start_post(gateway, size)
    second.send(b" " * (INFLIGHT_LIMIT - size + 1001))
    refused = second.getresponse()
    _assert_overloaded(refused.status, dict(refused.headers), refused.read())
    second.close()
    # Without Content-Length it is counted the same way.
    chunked = _start_post(gateway, None)
    piece = b" " * (INFLIGHT_LIMIT - size + 1001)
    chunked.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")  # the end never sent
    refused = chunked.getresponse()
    _assert_overloaded(refused.status, dict(refused.headers), refused.read())
    chunked.close()
    # A small request still fits beside the held one.
    short = gateway.chat("gpt-test", SHORT)
    assert short.status_code == 200
    first.send(body[-1000:])
    answered = first.getresponse()
    assert answered.status == 200
    answered.read()
    first.close()
    wait_for(lambda: gateway.state.body_bytes.used == 0)  # released when the response was sent
    again = _start_post(gateway, size)
    again.send(body)
    assert again.getresponse().status == 200
    again.close()
    assert gateway.metric('mixpr_requests_shed_total{limit="body_bytes"}') == 2


def test_stalled_uploads_cost_only_their_own_connections(gateway: Gateway) -> None:
    # Eight clients declare bodies that together fill the in-flight limit, then send nothing.
    stalled = [_start_post(gateway, INFLIGHT_LIMIT // 8) for _ in range(8)]
    for _ in range(5):  # nothing arrived, so nothing is held: others are served as usual
        short = gateway.chat("gpt-test", SHORT)
        assert short.status_code == 200
    assert gateway.state.body_bytes.used == 0
    # Each stalled upload gets a 408 after body_timeout_s and its connection is closed.
    for conn in stalled:
        with socket.socket(fileno=os.dup(conn.sock.fileno())) as raw:
            answer = conn.getresponse()
            assert (answer.status, answer.getheader("connection")) == (408, "close")
            assert json.loads(answer.read())["error"]["code"] == "request_timeout"
            raw.settimeout(10)
            assert raw.recv(1) == b""  # and the gateway closed the connection
        conn.close()


def test_a_trickling_upload_is_cut_off_below_the_minimum_rate(gateway: Gateway) -> None:
    conn = _start_post(gateway, BODY_LIMIT)
    conn.sock.settimeout(0.3)
    answer = None
    for _ in range(100):  # 1 byte every 0.1 s: far below min_body_bytes_per_s, never silent long
        conn.send(b" ")
        try:
            answer = conn.getresponse()
            break
        except TimeoutError:
            continue
    assert answer is not None and answer.status == 408
    conn.close()


def test_the_inflight_limit_must_hold_one_whole_body() -> None:
    raw = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}],
           "general_settings": {"max_body_bytes": 2_000_000, "max_inflight_body_bytes": 1_000_000}}
    with pytest.raises(ConfigError, match="max_inflight_body_bytes"):
        parse_config(raw)
    raw["general_settings"] = {"compression_workers": 3}
    assert parse_config(raw).general_settings.queued_compressions == 12
