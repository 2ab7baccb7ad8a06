"""What an upstream's error text may say of a credential never reaches a client: ``forward.redact``
knows OpenAI's ``sk-`` keys, Anthropic's ``sk-ant-``, bearer tokens, Google's ``AIza`` keys and Azure's
32-hex ``api-key`` values, and leaves words that merely contain ``sk-`` alone."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.upstream.forward import map_error, redact

SECRETS = {
    "openai": "sk-proj-AbCdEf0123456789_xyz-XYZ",
    "anthropic": "sk-ant-api03-AbCdEf0123456789-abcdefGHIJ_klm-AA",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "google": "AIzaSyA1b2C3d4E5f6G7h8I9j0K-L_mNoPqRsTu",
    "azure": "0123456789abcdef0123456789ABCDEF",
}
TEXTS = {
    "openai": "Incorrect API key provided: {}. You can find your API key at ...",
    "anthropic": "invalid x-api-key: {}",
    "bearer": "upstream said: Authorization: Bearer {} is expired",
    "google": "API key not valid. Please pass a valid API key. key={}",
    "azure": 'Access denied: "api-key": "{}" is not valid for this resource',
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_kind_of_key_is_redacted(kind: str) -> None:
    text = TEXTS[kind].format(SECRETS[kind])
    redacted = redact(text)
    assert SECRETS[kind] not in redacted
    assert SECRETS[kind][-6:] not in redacted  # no tail of it either
    assert "[redacted]" in redacted
    at = text.index(SECRETS[kind])
    assert redacted.startswith(text[:at]) and redacted.endswith(text[at + len(SECRETS[kind]):])


@pytest.mark.parametrize("text", [
    "The task-force asked for a risk-based desk-top review.",  # words holding "sk-"
    "request id 0123456789abcdef0123456789abcdef failed",  # 32 hex with no api-key label
    "The bearer of this message",
    "plain text with no secret",
])
def test_text_without_a_key_is_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_an_upstream_error_reaches_the_client_without_the_key(kind: str) -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    message = TEXTS[kind].format(SECRETS[kind])
    answer = httpx.Response(400, request=request, json={"error": {"message": message}})
    error = map_error(openai.BadRequestError(message, response=answer, body={"message": message}))
    assert error.status_code == 400 and SECRETS[kind] not in str(error.to_json())


@pytest.mark.parametrize("escape", ["\\n", "\\t", '\\"', "\\\\", "\\/", "\\u003c", "\\u0026", "\\\\\\n"])
def test_a_value_right_after_an_escape_in_text_is_redacted(escape: str) -> None:
    """Text that quotes JSON or a repr (a proxy's page, an exception's message, an event's plain data)
    has no decoded form: the letter ending an escape stood glued to the host and model after it."""
    from gateway.upstream.redaction import Redactor

    known = Redactor({"acme-chat-v3": "c", "gpu.acme.example:8000": "[upstream-host]",
                      "tnt-live-7f3a9c": "[redacted]"})
    text = f"said {escape}acme-chat-v3{escape}gpu.acme.example:8000{escape}tnt-live-7f3a9c{escape}done"
    out = known(text)
    assert out == f"said {escape}c{escape}[upstream-host]{escape}[redacted]{escape}done", out


def test_a_value_that_spans_a_backslash_is_still_redacted_whole() -> None:
    """The pieces between escapes are redacted after the whole text, not instead of it: a Windows path
    is one value."""
    from gateway.upstream.redaction import Redactor

    out = Redactor({"C:\\models\\qwen3-8b.gguf": "[model-file]"})("cannot open C:\\models\\qwen3-8b.gguf")
    assert out == "cannot open [model-file]", out
