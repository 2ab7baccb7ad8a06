"""The gateway's process-wide LiteLLM and openai SDK settings, installed by its app only (``install``).

Nothing here runs on import: the LiteLLM plug-in (``gateway.plugins``) lives inside somebody else's
LiteLLM proxy, whose retries, logging and request building must stay exactly as its owner set them.
``install`` (idempotent) is called by ``gateway.app.create_app``:

- ``litellm.DEFAULT_MAX_RETRIES = 0``: retrying is the client's call (it sees Retry-After). Every
  call passes ``max_retries=0``, but LiteLLM's OpenAI embedding path reads it as
  ``max_retries or DEFAULT_MAX_RETRIES``, so 0 must be the default too;
- ``litellm.suppress_debug_info`` and ``litellm.telemetry = False``: no "Give Feedback" banners on
  stdout for every upstream error, no phoning home;
- the offloading patches below.

Big upstream requests are built, and big answers read, in worker threads: never on the event loop.

The openai SDK, which LiteLLM uses for every OpenAI-compatible upstream, walks the whole request
against its typed schema before sending it (``async_maybe_transform``): about 0.5-1 ms per chat
message or content part and 60 us per string of an ``input`` or ``prompt`` list, in an ``async``
function that never yields. So one request of 19,000 parts held the gateway's loop, and every other
request, for 10-20 s. Reading an answer of one object per input (embeddings, a batch of prompts)
costs about as much again. Both scale with what the client sent, so requests with more than
``INLINE_ITEMS`` items move that work to the threads of ``gateway.run.offload``; smaller ones stay on
the loop, where a thread hop would cost more than the walk.

- ``install`` gives the SDK's chat and legacy completions resources a transform that runs in this
  pool for big bodies (streamed or not). It is the SDK's synchronous twin, which does the same walk
  and differs only in reading file objects, which a JSON body never holds.
- It also gives LiteLLM's OpenAI-compatible request translation (``OpenAIGPTConfig``, which walks
  every part twice in its async form and returns its synchronous form's result) and its success
  logging's copy of the messages (base64 truncation, a copy of every part) this pool for big bodies.
- ``run`` runs a whole blocking call in that pool (LiteLLM's synchronous embedding call: the SDK transforms
  that request synchronously inside its async method, and the answer is as big as the request).

Why not run LiteLLM on an event loop of its own: measured, that loop is blocked by the same walk,
so every short request's upstream call waits behind the big one (short p50 12.9 s against 7.8 s
before); and LiteLLM's process-wide logging worker breaks when calls run on several loops.
A cancelled request cannot stop its thread: the walk finishes, its result is dropped.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import litellm
import litellm.litellm_core_utils.litellm_logging as litellm_logging
import openai.resources.chat.completions.completions as chat_resource
import openai.resources.completions as completions_resource
from litellm.litellm_core_utils.logging_utils import truncate_base64_in_messages
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from openai._utils import maybe_transform

from gateway.run.offload import is_big, many, run

log = logging.getLogger("gateway.upstream.patches")

_PATCHED = "_mixpr_offloaded"
_installing = threading.Lock()


def install() -> None:
    """The gateway's LiteLLM settings, and the SDK's request transform for big chat and legacy
    completion bodies, LiteLLM's own translation and logging copy of big message lists routed to the
    pool. Idempotent: a second call (a second app in one process) changes nothing more."""
    with _installing:
        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.DEFAULT_MAX_RETRIES = 0
        for module in (chat_resource, completions_resource):
            _patch(module)
        _patch_litellm()


def _patch_litellm() -> None:
    translate = OpenAIGPTConfig.async_transform_request
    if not getattr(translate, _PATCHED, False):
        OpenAIGPTConfig.async_transform_request = _translator(translate)
    truncate = getattr(litellm_logging, "truncate_base64_in_messages_async", None)
    if truncate is None:  # a new LiteLLM layout: tests/gateway/upstream/test_upstream_offload.py says so
        log.warning("LiteLLM has no truncate_base64_in_messages_async; big requests are logged on the loop")
    elif not getattr(truncate, _PATCHED, False):
        litellm_logging.truncate_base64_in_messages_async = _marked(functools.partial(_truncate, truncate))


def _marked(fn: Any) -> Any:
    setattr(fn, _PATCHED, True)
    return fn


Body = dict[str, Any]


def _translator(original: Callable[..., Awaitable[Body]]) -> Callable[..., Awaitable[Body]]:
    async def translate(self: OpenAIGPTConfig, model: str, messages: list[Any], optional_params: Body,
                        litellm_params: Body, headers: Body) -> Body:
        """The request body LiteLLM sends. Its async form returns what the synchronous one does
        (after walking the parts once more); they differ only in fetching PDF URLs, which the gateway
        refuses (``gateway.edge.remote_files``) and which would block this thread, not the loop."""
        if many(messages):
            body = (model, messages, optional_params, litellm_params, headers)
            return await run(self.transform_request, *body)
        return await original(self, model, messages, optional_params, litellm_params, headers)

    return _marked(translate)


async def _truncate(original: Callable[[Any], Awaitable[Any]], messages: Any) -> Any:
    """LiteLLM's logging copy of the messages (long base64 payloads shortened): it copies every part,
    and counts their characters first, so a big list is copied in the pool."""
    if many(messages):
        return await run(truncate_base64_in_messages, messages)
    return await original(messages)


def _patch(module: ModuleType) -> None:
    original = getattr(module, "async_maybe_transform", None)
    if original is None:  # a new SDK layout: tests/gateway/upstream/test_upstream_offload.py says so
        log.warning("%s has no async_maybe_transform; big requests are built on the event loop",
                    module.__name__)
        return
    if not getattr(original, _PATCHED, False):
        offloaded = functools.partial(_transform, original)
        setattr(offloaded, _PATCHED, True)
        module.async_maybe_transform = offloaded


async def _transform(original: Callable[[Any, Any], Awaitable[Any]], data: Any, expected_type: Any) -> Any:
    if is_big(data):  # a dict of many items
        return await run(maybe_transform, data, expected_type)
    return await original(data, expected_type)
