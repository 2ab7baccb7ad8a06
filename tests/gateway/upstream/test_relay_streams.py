"""The relays' streams (``gateway.upstream.sse.Events``) against an upstream that misbehaves on
purpose (``sse_upstream``), on both relays: Anthropic Messages (``relay``) and chat (``chat_relay``).

- an event cut in half by a dropped connection never reaches the client half-sent: the client gets
  whole events, then the API's own in-band error;
- a client that leaves before the first event (the upstream holds its status line back) closes the
  upstream connection: the response was never read, so only its owner can close it;
- a client that leaves mid-stream closes the upstream connection (long before the upstream would
  have ended: the tests wait for the close, not for a time);
- events that end in ``\n\r\n`` are split as any others;
- an event that grows past ``max_event_bytes`` ends the stream with the API's in-band 502 error,
  and closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from sse_upstream import SseUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.upstream import chat_relay, http, relay

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
MODES = ("half", "late", "slow", "huge", "mixed")
MAX_EVENT_BYTES = 65536
PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def sse() -> Iterator[SseUpstream]:
    server = SseUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway_url(sse: SseUpstream) -> Iterator[str]:
    models = []
    for mode in MODES:
        models.append(
            {
                "model_name": f"anthropic-{mode}",
                "litellm_params": {"model": f"anthropic/{mode}", "api_base": sse.url, "api_key": "sk-a"},
            }
        )
        models.append(
            {
                "model_name": f"chat-{mode}",
                "litellm_params": {"model": f"openai/{mode}", "api_base": sse.url + "/v1", "api_key": "sk-o"},
            }
        )
    config = {
        "model_list": models,
        "mixpr_settings": {"router": "heuristic"},
        "general_settings": {
            "master_key": MASTER_KEY,
            "compression_executor": "thread",
            "compression_workers": 1,
            "max_event_bytes": MAX_EVENT_BYTES,
        },
    }
    server = ServerThread(create_app(parse_config(config))).start()
    yield server.url
    server.stop()


def _body(api: str, mode: str, marker: str) -> dict[str, Any]:
    return {
        "model": f"{api}-{mode}",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": marker}],
    }


def _events(text: str) -> list[str]:
    return [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]


def _data(event: str) -> str:
    return "".join(line[5:].strip() for line in event.split("\n") if line.startswith("data:"))


@pytest.mark.parametrize("api", sorted(PATHS))
def test_an_event_cut_by_a_dropped_connection_never_reaches_the_client(gateway_url: str, api: str) -> None:
    response = httpx.post(gateway_url + PATHS[api], json=_body(api, "half", "half"), headers=AUTH, timeout=30)
    assert response.status_code == 200
    events = _events(response.text)
    assert response.text.endswith("\n\n")
    for event in events:  # every event whole: its data parses
        data = _data(event)
        assert data == "[DONE]" or isinstance(json.loads(data), dict), event
    errors = [json.loads(_data(e)) for e in events if "error" in _data(e)]
    assert len(errors) == 1 and len(events) == 2 + 1 + (api == "chat")  # two whole, the error, [DONE]
    if api == "anthropic":
        assert events[-1].startswith("event: error") and errors[0]["type"] == "error"
    else:
        assert errors[0]["error"]["code"] == "upstream_connection_error"


def _hang_up_after(gateway_url: str, path: str, body: dict[str, Any], seconds: float) -> float:
    """Send the request on a raw socket, wait, close: the time the client left."""
    port = int(gateway_url.rsplit(":", 1)[1])
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {MASTER_KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + data)
        time.sleep(seconds)
        return time.monotonic()


@pytest.mark.parametrize("api", sorted(PATHS))
def test_a_client_leaving_before_the_first_event_closes_the_upstream(
    gateway_url: str, sse: SseUpstream, api: str
) -> None:
    marker = f"before-first-{api}-{time.monotonic()}"
    _hang_up_after(gateway_url, PATHS[api], _body(api, "late", marker), 0.2)  # the upstream answers at 0.6 s
    assert sse.closed(marker), "the upstream kept streaming to a client that had left"


@pytest.mark.parametrize("api", sorted(PATHS))
def test_a_client_leaving_mid_stream_closes_the_upstream(
    gateway_url: str, sse: SseUpstream, api: str
) -> None:
    marker = f"mid-{api}-{time.monotonic()}"
    with httpx.stream(
        "POST", gateway_url + PATHS[api], json=_body(api, "slow", marker), headers=AUTH, timeout=10
    ) as response:
        assert response.status_code == 200
        assert next(response.iter_lines())
    assert sse.closed(marker), "the upstream kept streaming to a client that had left"


@pytest.mark.parametrize("events", ["chat", "messages"])
def test_a_stream_nobody_reads_closes_its_upstream_connection(sse: SseUpstream, events: str) -> None:
    """An open stream dropped unread (the client left before its response started): closing it must
    close the connection, though the reader never ran (a generator never started runs no ``finally``)."""
    marker = f"unread-{events}-{time.monotonic()}"

    async def drop_unread() -> bool:
        client = http.Client(http.Policy.from_env(max_connections=4))
        try:
            body = json.dumps({"model": "slow", "messages": [{"role": "user", "content": marker}]}).encode()
            response = await client.post(
                sse.url + "/v1/chat/completions", body, {"content-type": "application/json"}, http.phases(5)
            )
            stream = (
                chat_relay.ChatEvents(response, "m", lambda usage: None)
                if events == "chat"
                else relay.MessageEvents(response, "m")
            )
            await stream.aclose()
            return await asyncio.to_thread(sse.closed, marker)
        finally:
            await client.aclose()

    assert asyncio.run(drop_unread()), "the upstream kept streaming for a stream dropped unread"


@pytest.mark.parametrize("api", sorted(PATHS))
def test_events_ending_in_lf_crlf_reach_the_client(gateway_url: str, api: str) -> None:
    body = _body(api, "mixed", "mixed")
    response = httpx.post(gateway_url + PATHS[api], json=body, headers=AUTH, timeout=30)
    assert response.status_code == 200
    events = [e for e in response.text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    assert len(events) == 4, response.text  # three events, then message_stop or [DONE]
    assert "error" not in response.text


@pytest.mark.parametrize("api", sorted(PATHS))
def test_an_event_past_max_event_bytes_ends_the_stream_with_an_error(
    gateway_url: str, sse: SseUpstream, api: str
) -> None:
    marker = f"huge-{api}-{time.monotonic()}"
    response = httpx.post(gateway_url + PATHS[api], json=_body(api, "huge", marker), headers=AUTH, timeout=30)
    assert response.status_code == 200  # the stream had started: the error comes in-band
    assert len(response.content) < MAX_EVENT_BYTES  # none of the oversized event was passed on
    errors = [json.loads(_data(e)) for e in _events(response.text) if "error" in _data(e)]
    assert len(errors) == 1, response.text
    if api == "anthropic":
        assert errors[0]["type"] == "error" and "max_event_bytes" in errors[0]["error"]["message"]
    else:
        assert errors[0]["error"]["code"] == "upstream_invalid_response"
    assert sse.closed(marker), "the upstream kept streaming after the event was refused"
