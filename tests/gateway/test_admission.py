"""Admission control: past the compression queue or the in-memory body bytes, a fast 503, never a pile-up."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
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


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with hold_switch(tmp_path_factory.mktemp("admission")) as path:
        yield path


@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream, hold: Path) -> Iterator[Gateway]:
    server = Gateway(upstream.base_url, compression_workers=1, max_queued_compressions=QUEUED,
                     max_body_bytes=BODY_LIMIT, max_inflight_body_bytes=INFLIGHT_LIMIT)
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


def test_bodies_past_the_inflight_limit_are_refused_without_being_read(gateway: Gateway) -> None:
    size = BODY_LIMIT
    first = _start_post(gateway, size)
    body = _short_body(size)
    first.send(body[:1000])  # the gateway now holds a reservation for all of it
    wait_for(lambda: gateway.state.body_bytes.used >= size)
    # A second large body does not fit beside it: refused before a byte of it is sent.
    second = _start_post(gateway, size)
    refused = second.getresponse()
    _assert_overloaded(refused.status, dict(refused.headers), refused.read())
    second.close()
    # Without Content-Length it is counted as it arrives, and refused once over.
    chunked = _start_post(gateway, None)
    piece = b" " * (INFLIGHT_LIMIT - size + 1)
    chunked.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")  # the end never sent
    refused = chunked.getresponse()
    _assert_overloaded(refused.status, dict(refused.headers), refused.read())
    chunked.close()
    # A small request still fits beside the held one.
    short = gateway.chat("gpt-test", SHORT)
    assert short.status_code == 200
    first.send(body[1000:])
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


def test_the_inflight_limit_must_hold_one_whole_body() -> None:
    raw = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}],
           "general_settings": {"max_body_bytes": 2_000_000, "max_inflight_body_bytes": 1_000_000}}
    with pytest.raises(ConfigError, match="max_inflight_body_bytes"):
        parse_config(raw)
    raw["general_settings"] = {"compression_workers": 3}
    assert parse_config(raw).general_settings.queued_compressions == 12
