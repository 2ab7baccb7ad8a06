"""LiteLLM's first call before readiness (``gateway.upstream.warm``): it goes all the way to an answer
and back, over no network, and leaves nothing running (the compression pool's fork server forks after
it: a thread or a listening socket left behind would be copied into every worker)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

from gateway.upstream import warm  # noqa: E402


def _refused(base: str) -> bool:
    """Whether nothing listens any more at ``base`` (http://127.0.0.1:PORT/v1)."""
    port = int(base.rsplit(":", 1)[1].split("/")[0])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def _serving() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == warm.SERVING]


def test_the_first_call_is_answered_on_loopback_and_leaves_no_thread_or_socket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[Any] = []
    bases: list[str] = []
    completion = litellm.completion

    def recording(**kwargs: Any) -> Any:
        bases.append(kwargs["api_base"])
        answers.append(completion(**kwargs))
        return answers[-1]

    monkeypatch.setattr(litellm, "completion", recording)
    warm.first_call()
    # Answers came back, a priced model's and another's (the way back is what the first request after
    # readiness paid for): a server's, for LiteLLM's own mock answers carry an id of their own and
    # touch no client or socket ...
    assert [(a.id, a.choices[0].message.content) for a in answers] == [("warm-up", "y")] * len(warm.MODELS)
    # ... and the server that gave them is gone (LiteLLM's own logging thread is LiteLLM's business).
    assert _serving() == []
    assert all(_refused(base) for base in bases)


async def test_the_first_async_call_is_answered_for_each_configured_openai_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The gateway forwards with acompletion: another client and logging than completion's.
    asked: list[tuple[str, str]] = []
    answers: list[Any] = []
    acompletion = litellm.acompletion

    async def recording(**kwargs: Any) -> Any:
        asked.append((kwargs["model"], kwargs["api_base"]))
        answers.append(await acompletion(**kwargs))
        return answers[-1]

    monkeypatch.setattr(litellm, "acompletion", recording)
    await warm.first_async_call(["openai/mine", "anthropic/claude-sonnet-4-5", "openai/mine"])
    assert [model for model, _ in asked] == [*warm.MODELS, "openai/mine"]
    assert [a.choices[0].message.content for a in answers] == ["y"] * len(asked)
    assert _serving() == []
    assert all(_refused(base) for _, base in asked)


def test_the_configured_models_warmed_are_bounded() -> None:
    many = [f"openai/model-{i}" for i in range(3 * warm.MAX_OWN)]
    assert warm.warmed(many) == [*warm.MODELS, *many[:warm.MAX_OWN]]


def test_a_failing_first_call_is_ignored_and_still_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(**kwargs: Any) -> Any:
        raise litellm.APIConnectionError("no", llm_provider="openai", model=kwargs["model"])

    monkeypatch.setattr(litellm, "completion", failing)
    quiet = litellm.suppress_debug_info
    warm.first_call()
    assert _serving() == []
    assert litellm.suppress_debug_info == quiet


async def test_the_warm_up_calls_leave_no_litellm_record_and_other_calls_still_do(
        caplog: pytest.LogCaptureFixture) -> None:
    # An operator reading the start's log would look for requests nobody sent.
    caplog.set_level(logging.INFO, logger="LiteLLM")
    warm.first_call(["openai/mine"])
    await warm.first_async_call(["openai/mine"])
    assert [r.getMessage() for r in caplog.records if r.name == "LiteLLM"] == []
    with contextlib.suppress(Exception):  # nothing listens on port 9: the record comes before the call
        litellm.completion(model="openai/mine", api_base="http://127.0.0.1:9/v1", api_key="x", timeout=1,
                           max_retries=0, messages=[{"role": "user", "content": "y"}])
    assert any("mine" in r.getMessage() for r in caplog.records if r.name == "LiteLLM")
