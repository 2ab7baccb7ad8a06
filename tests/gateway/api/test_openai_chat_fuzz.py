"""Property-based bodies for POST /v1/chat/completions: whatever arrives, the answer is a 200 or a
4xx in OpenAI's error shape, never a 5xx, a hang or a traceback.

The bodies are raw bytes, so they can be what no JSON library writes: invalid UTF-8, lone
surrogates, NaN, duplicate keys, deep nesting, truncation. Model "gpt-test" answers 200 from the
fake upstream, so a body the gateway accepts goes all the way through LiteLLM and back.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import MASTER_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROLES = ["system", "developer", "user", "assistant", "tool", "function", "wizard", ""]
PARAMS = ["temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens", "presence_penalty",
          "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "seed", "user", "tools",
          "tool_choice", "parallel_tool_calls", "response_format", "stream_options", "metadata", "store",
          "functions", "function_call", "reasoning_effort", "modalities", "audio", "prediction",
          "service_tier", "mixpr", "stream", "model", "messages", "x-unknown"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]

JSON = {"content-type": "application/json"}
clean_text = st.text(max_size=40)
odd_text = st.sampled_from(["\ud800", "a\udfffb", "\x00", "é", "😀", "", "\u2028"])
# One string in 20 is odd: a lone surrogate anywhere makes the whole body a 400, so keep them rare.
text = st.integers(0, 19).flatmap(lambda i: odd_text if i == 0 else clean_text)
numbers = st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | numbers | text
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(text, inner, max_size=4), max_leaves=12)

part_types = st.sampled_from(["text", "image_url", "input_audio", "bogus"]) | json_values
parts = st.fixed_dictionaries({"type": part_types}, optional={"text": json_values, "image_url": json_values})
content = st.none() | text | st.lists(parts | json_values, max_size=3) | json_values
message = st.fixed_dictionaries(
    {"role": st.sampled_from(ROLES) | json_values},
    optional={"content": content, "name": json_values, "tool_calls": json_values,
              "tool_call_id": json_values, "function_call": json_values},
) | json_values
chat = st.fixed_dictionaries(
    {"model": st.just("gpt-test") | json_values,
     "messages": st.lists(message, min_size=0, max_size=4) | json_values},
    optional={key: json_values for key in PARAMS if key not in ("model", "messages")},
).map(lambda body: {**body, "max_tokens": 3} if "max_tokens" not in body else body)
tool = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": clean_text}, optional={"description": clean_text, "parameters": json_values | st.just(
        {"type": "object", "properties": {"x": {"type": "string"}}})})})
plausible = {  # well-typed values (sometimes anything), so most bodies get through to LiteLLM
    "temperature": st.floats(0, 2), "top_p": st.floats(0, 1), "n": st.integers(1, 2),
    "stop": clean_text | st.lists(clean_text, max_size=3), "seed": st.integers(-2**63, 2**63),
    "user": clean_text, "logprobs": st.booleans(), "top_logprobs": st.integers(0, 5),
    "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
    "logit_bias": st.dictionaries(st.integers(0, 99).map(str), st.integers(-100, 100), max_size=2),
    "tools": st.lists(tool, max_size=2), "tool_choice": st.sampled_from(["auto", "none", "required"]),
    "parallel_tool_calls": st.booleans(), "stream": st.booleans(),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {"type": "bogus"}]),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "metadata": st.dictionaries(clean_text, clean_text, max_size=2), "store": st.booleans(),
    "reasoning_effort": st.sampled_from(["low", "high", "extreme"]), "x-unknown": json_values,
}
plausible_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio", "file", "refusal", "bogus"])},
    optional={"text": clean_text, "image_url": st.fixed_dictionaries({"url": clean_text})})
valid_chat = st.fixed_dictionaries(
    {"model": st.just("gpt-test"),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(ROLES[:4]), "content": text
                                                 | st.lists(plausible_part, max_size=2)}),
                          min_size=1, max_size=3)},
    optional={key: values | values | values | json_values for key, values in plausible.items()},
)


def _dump(value: Any, ascii_only: bool) -> bytes:
    # allow_nan writes NaN/Infinity; surrogatepass lets lone surrogates through as (invalid) UTF-8.
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True).encode("utf-8", "surrogatepass")


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["chat", "valid", "valid", "valid", "value", "bytes", "nested", "duplicate",
                                 "cut", "huge"]))
    if kind in ("chat", "valid"):
        return _dump(draw(chat if kind == "chat" else valid_chat), draw(st.booleans()))
    if kind == "value":
        return _dump(draw(json_values), draw(st.booleans()))
    if kind == "bytes":
        return draw(st.binary(max_size=3))
    if kind == "nested":
        depth = draw(st.integers(1, 50_000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        inner = opener * depth + "1" + closer * depth
        return ('{"model": "gpt-test", "messages": [{"role": "user", "content": ' + inner + "}]}").encode()
    if kind == "duplicate":
        first, second = draw(json_values), draw(json_values)
        return (b'{"model": "gpt-test", "messages": ' + _dump(first, True) + b', "messages": '
                + _dump(second, True) + b', "model": "gpt-test"}')
    if kind == "cut":
        whole = _dump(draw(valid_chat), False)
        return whole[: draw(st.integers(0, len(whole)))] + draw(st.binary(max_size=4))
    size = draw(st.sampled_from([100_000, 900_000, 1_100_000]))
    return _dump({"model": "gpt-test", "messages": [{"role": "user", "content": "word " * (size // 5)}],
                  "mixpr": {"enabled": False}, "max_tokens": 3}, False)


@pytest.fixture(scope="module")
def raw_client(gateway_url: str) -> Any:
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    with httpx.Client(base_url=gateway_url, timeout=20, headers=headers) as c:
        yield c


def _check(response: httpx.Response) -> None:
    body = response.content
    assert b"Traceback" not in body and b'File "' not in body, body[:500]
    if response.status_code == 200:
        return
    assert 400 <= response.status_code < 500, (response.status_code, body[:500])
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in ("invalid_request_error", "authentication_error", "not_found_error")


@settings(max_examples=250, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(body=raw_bodies(), content_type=st.sampled_from(CONTENT_TYPES))
def test_any_body_gets_a_200_or_an_openai_4xx(raw_client: httpx.Client, body: bytes,
                                              content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = raw_client.post("/v1/chat/completions", content=body, headers=headers)
    _check(response)


@pytest.mark.parametrize(("value", "message"), [
    (b"NaN", "The JSON body contains NaN, which is not valid JSON."),
    (b"-Infinity", "The JSON body contains -Infinity, which is not valid JSON."),
    (b'"\\ud800"', "The JSON body contains a lone surrogate (\\ud800-\\udfff), which is not valid Unicode."),
    (b"[" * 65 + b"]" * 65, "The JSON body is nested more than 64 levels deep."),
    (b"[" * 100_000, "The JSON body is nested more than 64 levels deep."),
])
def test_what_python_would_parse_but_json_forbids_is_400(raw_client: httpx.Client, value: bytes,
                                                         message: str) -> None:
    head = b'{"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "user": '
    response = raw_client.post("/v1/chat/completions", content=head + value + b"}", headers=JSON)
    assert (response.status_code, response.json()["error"]["message"]) == (400, message)


@pytest.mark.parametrize(("content", "extra", "param"), [
    ([1], {}, "messages[0].content[0]"),
    ([{"type": "image_url"}], {}, "messages[0].content[0].image_url"),
    ([{"type": "file", "file": 5}], {}, "messages[0].content[0].file"),
    ([{"type": "text", "text": None}], {}, "messages[0].content[0].text"),
    ("hi", {"tools": [5]}, "tools"),
    ("hi", {"tools": [{"type": "function", "function": "f"}]}, "tools[0]"),
    ("hi", {"temperature": "hot"}, "temperature"),
    ("hi", {"stop": [1, 2]}, "stop"),
])
def test_what_litellm_would_choke_on_is_400(raw_client: httpx.Client, content: Any, extra: dict,
                                           param: str) -> None:
    # Found by the fuzz above: LiteLLM crashed on each of these (some as a fake "connection error").
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": content}], **extra}
    response = raw_client.post("/v1/chat/completions", json=body)
    assert (response.status_code, response.json()["error"]["param"]) == (400, param)


# -- the x-mixpr-* headers ------------------------------------------------------------------------

HEADER_CHARS = [chr(c) for c in [*range(0x20, 0x7F), *range(0x80, 0x100)]]  # what HTTP lets through
TRICKY = ["²", "³", "١٦", "１６", "1e999", "-16", "+16", "16.0", "0x10", "1_000", "16 16", "auto", "AUTO",
          "nan", "inf", "-inf", "9" * 19, "9" * 5000, "15", "0", "true", "FALSE", "1", "global", "Local",
          "\xa016", "16\x85", "ǅ", "ß"]


def _header_value(text: str) -> bytes:
    # Latin-1 when it fits (uvicorn decodes header bytes as latin-1), else UTF-8 bytes; HTTP allows
    # no whitespace at either end.
    raw = text.encode("latin-1") if all(ord(c) < 256 for c in text) else text.encode()
    return raw.strip(b" \t")


header_values = (st.text(alphabet=st.sampled_from(HEADER_CHARS), max_size=24) | st.sampled_from(TRICKY)
                 | st.integers(-2**70, 2**70).map(str)).map(_header_value)
valid_budgets = st.integers(16, 10**17).map(str) | st.sampled_from(["auto", "AUTO", " 4000"])


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(values=st.fixed_dictionaries({}, optional={"enabled": header_values, "route": header_values,
                                                  "budget-tokens": header_values}))
def test_any_mixpr_header_gets_a_200_or_a_400_naming_it(raw_client: httpx.Client,
                                                        values: dict[str, bytes]) -> None:
    headers = {"x-mixpr-" + name: value for name, value in values.items()}
    response = raw_client.post("/v1/chat/completions", json=HEADER_BODY, headers=headers)
    _check(response)
    if response.status_code != 200:
        assert response.status_code == 400
        param = response.json()["error"]["param"]
        assert param in {"mixpr." + name.replace("-", "_") for name in values}, param


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=valid_budgets)
def test_a_valid_budget_header_is_taken(raw_client: httpx.Client, budget: str) -> None:
    headers = {"x-mixpr-budget-tokens": budget.strip(), "x-mixpr-enabled": "true"}
    response = raw_client.post("/v1/chat/completions", json=HEADER_BODY, headers=headers)
    assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize("value", ["²".encode("latin-1"), "²".encode(), b"1e999", b"9" * 5000, "١٦".encode()])
def test_budget_headers_that_are_not_ascii_integers_are_400(raw_client: httpx.Client, value: bytes) -> None:
    response = raw_client.post("/v1/chat/completions", json=HEADER_BODY,
                               headers={"x-mixpr-budget-tokens": value})
    assert (response.status_code, response.json()["error"]["param"]) == (400, "mixpr.budget_tokens")


HEADER_BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "Hello."}], "max_tokens": 3}
