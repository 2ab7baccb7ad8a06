"""``POST /beta/litellm_basic_guardrail_api`` on the running gateway, in LiteLLM's own wire shapes.

The end-to-end path through a real LiteLLM proxy is ``test_litellm_guardrail.py``; these check the
endpoint's answers one by one, with the request bodies LiteLLM's ``generic_guardrail_api`` sends.
"""

from __future__ import annotations

from typing import Any

import httpx
from corpus import NEEDLE, QUESTION, haystack
from litellm.types.proxy.guardrails.guardrail_hooks.generic_guardrail_api import (
    GenericGuardrailAPIRequest,
    GenericGuardrailAPIResponse,
)

from mixpr.tokens import count_tokens

PATH = "/beta/litellm_basic_guardrail_api"
LONG = haystack(600) + "\n\n" + QUESTION


def litellm_request(**fields: Any) -> dict[str, Any]:
    """The body exactly as LiteLLM builds it (its own request model, dumped as it dumps it)."""
    fields.setdefault("input_type", "request")
    fields.setdefault("request_data", {})
    return GenericGuardrailAPIRequest(**fields).model_dump(mode="json")


def ask(http: httpx.Client, **fields: Any) -> tuple[httpx.Response, GenericGuardrailAPIResponse]:
    response = http.post(PATH, json=litellm_request(**fields))
    assert response.status_code == 200, response.text
    return response, GenericGuardrailAPIResponse.from_dict(response.json())


def test_long_structured_messages_come_back_as_texts_one_for_one(http: httpx.Client) -> None:
    """Rows are what is compressed, texts what is answered: LiteLLM writes texts back block by block
    (a new list of rows would make it rebuild an Anthropic request, and lose blocks)."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
    response, answer = ask(http, model="small", structured_messages=messages, texts=["Be brief.", LONG])
    assert answer.action == "GUARDRAIL_INTERVENED" and answer.structured_messages is None
    texts = list(answer.texts or [])
    assert len(texts) == 2 and texts[0] == "Be brief."
    kept = texts[1]
    assert NEEDLE in kept and QUESTION in kept
    assert count_tokens(kept, "gpt-4o-mini") <= 850 < count_tokens(LONG, "gpt-4o-mini")
    assert response.headers["x-mixpr-action"] == "compressed"


def test_texts_alone_come_back_as_texts(http: httpx.Client) -> None:
    _, answer = ask(http, model="small", texts=[LONG])
    assert answer.action == "GUARDRAIL_INTERVENED" and answer.structured_messages is None
    assert len(answer.texts or []) == 1 and NEEDLE in answer.texts[0] and len(answer.texts[0]) < len(LONG) / 4


def test_short_prompt_and_replies_are_left_alone(http: httpx.Client) -> None:
    _, short = ask(http, model="small", structured_messages=[{"role": "user", "content": "Hi"}], texts=["Hi"])
    _, reply = ask(http, model="small", input_type="response", texts=[LONG])
    assert (short.action, short.texts, short.structured_messages) == ("NONE", None, None)
    assert (reply.action, reply.texts) == ("NONE", None)


def test_switches_arrive_in_the_forwarded_request_headers(http: httpx.Client) -> None:
    """LiteLLM forwards allow-listed headers' values (``extra_headers``), others as "[present]"."""
    headers = {"x-mixpr-enabled": "false", "authorization": "[present]"}
    _, answer = ask(http, model="small", texts=[LONG], request_headers=headers)
    assert answer.action == "NONE"


def test_the_gateway_key_and_a_known_model_are_required(gateway_url: str, http: httpx.Client) -> None:
    body = litellm_request(model="small", texts=[LONG])
    assert httpx.post(gateway_url + PATH, json=body).status_code == 401
    assert httpx.post(gateway_url + PATH, json=body, headers={"x-api-key": "wrong"}).status_code == 401
    unknown = http.post(PATH, json=litellm_request(model="nope", texts=[LONG]))
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert http.post(PATH, json=[1]).status_code == 400


def test_short_tool_results_and_texts_without_a_row_part_come_back_whole(http: httpx.Client) -> None:
    """A failed tool's short result is not cut to "[…]"; each text keeps its place in the answer."""
    error = "ERROR E503: archive unavailable"
    messages = [{"role": "user", "content": "Look the falcon up."},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "t1", "type": "function",
                                 "function": {"name": "lookup", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": error},
                {"role": "user", "content": LONG}]
    texts = ["A system block LiteLLM scanned but did not put in a row.", "Look the falcon up.", error, LONG]
    _, answer = ask(http, model="small", structured_messages=messages, texts=texts)
    assert answer.action == "GUARDRAIL_INTERVENED" and answer.structured_messages is None
    out = list(answer.texts or [])
    assert len(out) == 4 and out[0] == texts[0] and out[2] == error
    assert QUESTION in out[3] and len(out[3]) < len(LONG) / 4


def test_rows_without_texts_come_back_as_rows(http: httpx.Client) -> None:
    """A direct caller that sends only rows (LiteLLM always sends texts too) gets rows back."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
    _, answer = ask(http, model="small", structured_messages=messages)
    rows = list(answer.structured_messages or [])
    assert answer.action == "GUARDRAIL_INTERVENED" and len(rows) == 2 and rows[0] == messages[0]
    assert NEEDLE in rows[1]["content"] and len(rows[1]["content"]) < len(LONG) / 4
