"""The body reader every API shares (``gateway.edge.body``), over real HTTP: what a body may cost.

A body is JSON sent as ``application/json`` (415 otherwise, in each API's error shape), of bounded
size and shape (a documented cap on objects and arrays), with finite numbers; one made of many
parts is still handled in time linear in its size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY
from fake_upstream import FakeUpstream
from pool_control import Gateway

from gateway.config import GeneralSettings

AUTH = {"Authorization": f"Bearer {MASTER_KEY}"}
JSON = {"content-type": "application/json"}
HELLO = [{"role": "user", "content": "Hello."}]
ENDPOINTS = {  # a valid body for each API that reads one
    "/v1/chat/completions": {"model": "gpt-test", "messages": HELLO, "max_tokens": 3},
    "/v1/responses": {"model": "gpt-test", "input": "Hello."},
    "/v1/messages": {"model": "gpt-test", "messages": HELLO, "max_tokens": 3},
    "/v1/completions": {"model": "gpt-test", "prompt": "Hello."},
    "/v1/embeddings": {"model": "gpt-test", "input": "Hello."},
}


def _parts(count: int) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "w"} for _ in range(count)]


def _assert_error(response: httpx.Response, status: int, path: str) -> str:
    """The status, in the error shape of the API at ``path``; returns the message."""
    assert response.status_code == status, response.text[:300]
    body = response.json()
    if path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


@pytest.fixture(scope="module")
def roomy(upstream: FakeUpstream) -> Iterator[Gateway]:
    """A gateway whose body limit (8 MB) lets 150,000 parts (4.6 MB) arrive."""
    server = Gateway(upstream.base_url, compression_workers=1, max_body_bytes=8_000_000)
    yield server
    server.stop()


def test_a_message_of_150000_parts_is_a_clear_400_naming_the_limit(roomy: Gateway) -> None:
    limit = GeneralSettings().max_body_objects
    response = roomy.chat("gpt-test", [{"role": "user", "content": _parts(150_000)}])
    message = _assert_error(response, 400, "/v1/chat/completions")
    assert f"more than {limit} objects and arrays" in message
    assert "general_settings.max_body_objects" in message


def test_many_one_letter_parts_under_the_limit_are_compressed(http: httpx.Client,
                                                              upstream: FakeUpstream) -> None:
    # One-letter words give MixPR no vocabulary: it used to raise, and the request failed.
    upstream.clear()
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": _parts(1000)}],
            "mixpr": {"enabled": True, "budget_tokens": 100}}
    response = http.post("/v1/chat/completions", json=body)
    assert (response.status_code, response.headers["x-mixpr-action"]) == (200, "compressed")
    [sent] = [r.json for r in upstream.received("echo")]
    parts = sent["messages"][0]["content"]
    assert len(parts) == 1000  # every part keeps its place, cut down or not
    assert {p["text"] for p in parts} == {"w", "[…]"}


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data"])
def test_only_json_bodies_are_accepted(gateway_url: str, path: str, content_type: str | None) -> None:
    # What a web page may send cross-site without a CORS preflight: refused before it is read.
    headers = {**AUTH, **({"content-type": content_type} if content_type else {})}
    response = httpx.post(gateway_url + path, content=json.dumps(ENDPOINTS[path]), headers=headers)
    message = _assert_error(response, 415, path)
    assert "Content-Type: application/json" in message


@pytest.mark.parametrize("content_type", ["application/json", "Application/JSON; charset=utf-8"])
def test_json_bodies_are_accepted_with_parameters(http: httpx.Client, content_type: str) -> None:
    body = json.dumps(ENDPOINTS["/v1/chat/completions"])
    response = http.post("/v1/chat/completions", content=body, headers={"content-type": content_type})
    assert response.status_code == 200


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1E400"])
@pytest.mark.parametrize("field", ["temperature", "max_tokens", "mixpr.budget_tokens"])
def test_numbers_too_large_for_a_float_are_400(http: httpx.Client, number: str, field: str) -> None:
    value = '{"budget_tokens": ' + number + "}" if field.startswith("mixpr") else number
    key = field.split(".")[0]
    raw = '{"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "' + key + '": ' + value
    raw += "}"
    response = http.post("/v1/chat/completions", content=raw, headers=JSON)
    message = _assert_error(response, 400, "/v1/chat/completions")
    assert message == f"The JSON body contains the number {number}, which is too large to be a finite number."
