"""A long document pasted once, then question after question, through a window far smaller than it:
every turn is answered (never a 400 while what is never cut fits), each follow-up brings evidence
retrieved for its own question, and a chat of short lines through a small window is compressed, not
refused. In-process gateway (uvicorn in a thread) in front of the tests' recording upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pydoc_data.topics import topics
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from corpus import SENTENCES
from fake_upstream import FakeUpstream

from gateway import create_app
from gateway.config import parse_config
from gateway.conversation.evidence import CLOSE, GAP, OPEN
from mixpr.tokens import count_tokens

WINDOW = 32_000
SMALL = 4_000
@pytest.fixture(scope="module")
def gateway(upstream: FakeUpstream) -> Iterator[str]:
    def entry(name: str, window: int) -> dict[str, Any]:
        return {"model_name": name, "model_info": {"max_input_tokens": window},
                "litellm_params": {"model": f"openai/{name}", "api_base": upstream.base_url, "api_key": "x"}}

    config = {"model_list": [entry("window", WINDOW), entry("small", SMALL)],
              "mixpr_settings": {"router": "heuristic", "token_margin": 0},
              "general_settings": {"compression_workers": 1, "compression_executor": "thread"}}
    server = ServerThread(create_app(parse_config(config))).start()
    try:
        yield server.url
    finally:
        server.stop()


def _turns(upstream: FakeUpstream, url: str, model: str, history: list[dict[str, Any]],
           questions: list[tuple[str, str]]) -> list[tuple[httpx.Response, list[dict[str, Any]]]]:
    """Each question as a new user turn after ``history`` (the reply appended before the next): the
    gateway's response and what the upstream received (None when nothing reached it)."""
    out = []
    messages = list(history)
    with httpx.Client(base_url=url, timeout=600) as http:
        for question, reply in questions:
            messages = [*messages, {"role": "user", "content": question}]
            upstream.clear()
            response = http.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                                "max_tokens": 200})
            seen = [r.json["messages"] for r in upstream.received() if r.path.endswith("/chat/completions")]
            out.append((response, seen[0] if seen else None))
            messages = [*messages, {"role": "assistant", "content": reply}]
    return out


def _tokens(messages: list[dict[str, Any]]) -> int:
    return sum(count_tokens(str(m.get("content") or ""), None) + 4 for m in messages)


def test_a_long_document_conversation_is_never_refused(upstream: FakeUpstream, gateway: str) -> None:
    """Python's language reference (79 topics, ~106k tokens, in every Python) pasted with a question,
    then a follow-up a turn about topic after topic, through a 32k window: every turn goes out within
    the window, and every follow-up carries evidence retrieved for its own question. (Older
    follow-ups' evidence blocks, which no reset could cut, piled up until the forms no longer fit: a
    400 at turns 11 and 12.)"""
    reference = "\n\n".join(topics.values())
    names = sorted(topics)[:: len(topics) // 20][:20]
    questions = [(f"What does the reference say about {name.replace('-', ' ')}?", "") for name in names]
    questions[0] = (f"{reference}\n\n{questions[0][0]}", "")
    turns = _turns(upstream, gateway, "window", [], questions)
    statuses = [response.status_code for response, _ in turns]
    assert statuses == [200] * len(questions), [r.text[:300] for r, _ in turns if r.status_code != 200]
    assert all(_tokens(seen) <= WINDOW for _, seen in turns)
    assert all(seen[-1]["content"].startswith(OPEN) for _, seen in turns[1:])  # not a whole-request cut
    # The document's first-sight form keeps keep_tokens and a tenth of the rest (prefix.document_keep),
    # at most 0.6 of the room, and a reset leaves three tenths of the room (prefix.document_fill):
    # later questions bring their own evidence.
    assert _tokens(turns[1][1]) < 0.6 * WINDOW
    after_resets = [seen for response, seen in turns[2:] if response.headers["x-mixpr-reset"] == "true"]
    assert after_resets and all(_tokens(seen) < 0.45 * WINDOW for seen in after_resets)


def test_a_question_asked_again_keeps_the_first_askings_evidence(upstream: FakeUpstream,
                                                                  gateway: str) -> None:
    """The same question about another of the pasted documents (contract reviews ask each category
    of each contract): the first asking keeps its own block, so the earlier request's bytes are sent
    again as they were (it lost its block: a cache miss and a reset), and the second brings none of
    the first's passages (the same block again repeated them)."""
    reference = "\n\n".join(topics.values())
    asked = "What does the reference say about the assert statement?"
    questions = [(f"{reference}\n\nWhich pdb command prints the return value?", "retval"),
                 (asked, "It checks a condition."), ("What does yield do?", "It produces a value."),
                 (asked, "As before.")]
    turns = _turns(upstream, gateway, "window", [], questions)
    assert [r.status_code for r, _ in turns] == [200] * 4
    third, fourth = turns[2][1], turns[3][1]
    assert fourth[: len(third)] == third
    assert turns[3][0].headers["x-mixpr-reset"] == "false"
    first, again = (_passages(fourth[i]["content"]) for i in (2, -1))
    assert first and not first & again


def _passages(content: str) -> set[str]:
    """The passages of a follow-up's evidence block."""
    block = content.split(CLOSE)[0].removeprefix(OPEN) if content.startswith(OPEN) else ""
    return {p.strip() for p in block.split(GAP) if p.strip()}


def test_a_chat_of_short_lines_through_a_small_window_is_compressed_not_refused(
    upstream: FakeUpstream, gateway: str,
) -> None:
    """Hundreds of one-line turns (each too short for a reset to cut) through a 4k window: the forms
    cannot fit, so the whole request is compressed for its question, and the change is reported as
    a reset (it was a 400 "Compressed it is still 16015 tokens")."""
    history = [{"role": "user" if i % 2 else "assistant", "content": SENTENCES[i % len(SENTENCES)]}
               for i in range(1, 400)]
    turns = _turns(upstream, gateway, "small", history,
                   [("Who walked along the hedgerow each morning?", "Margaret."),
                    ("What was the vicar's garden famous for?", "Its roses.")])
    for response, seen in turns:
        assert response.status_code == 200, response.text[:300]
        assert _tokens(seen) <= SMALL
        assert response.headers["x-mixpr-action"] == "compressed"
    assert turns[1][0].headers["x-mixpr-reset"] == "true"


def test_what_is_never_cut_is_named_when_it_cannot_fit(upstream: FakeUpstream, gateway: str) -> None:
    """A 400 only when the parts never compressed exceed the window, and its message says which."""
    system = {"role": "system", "content": " ".join(SENTENCES) * 30}  # ~6k tokens, never cut
    history = [system, {"role": "user", "content": " ".join(SENTENCES) * 20},
               {"role": "assistant", "content": "Noted."}]
    [(response, seen)] = _turns(upstream, gateway, "small", history, [("Who is Margaret?", "")])
    assert response.status_code == 400 and seen is None
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "system and developer messages" in error["message"]
