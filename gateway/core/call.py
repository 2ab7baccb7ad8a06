"""A chat call in the gateway's own terms, shared by ``gateway.core.prepare`` and observe mode
(``gateway.core.observe``), which both prepare it and import neither each other's internals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gateway.compress.policy import Control
from gateway.conversation import warmth
from gateway.core import reply


@dataclass(frozen=True)
class ChatCall:
    """A chat completion request in the gateway's own terms (OpenAI chat messages)."""

    model: str  # a model_name from model_list
    messages: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)  # every other OpenAI chat parameter
    control: Control = Control()
    stream: bool = False
    # How the messages prepared for the upstream become the ones sent, when ``messages`` is a view
    # of a richer request (Anthropic blocks: ``gateway.api.anthropic_blocks``); None: as they are.
    wire: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    raw_reply: bool = False  # the API can take the chat answer as bytes from the raw relay (body, events)
    session: str | None = None  # the conversation the client names (``gateway.core.cache_key``)
    # False when whoever forwards the call cannot send a lowered max_tokens (the generic guardrail
    # API answers with texts only): the reply then keeps what the client asked (``gateway.core.reply``).
    lowers_reply: bool = True
    # The messages are a conversation's earlier turns as another gateway hands them over, without its
    # newest turn and often without the assistant rows (``/v1/compress``): compressed message by
    # message, as a multi-turn conversation is, so that the next request's answer only appends.
    conversation: bool = False
    # The client asked the provider to cache for an hour where ``messages`` does not show it: an
    # Anthropic block's ``cache_control`` (the view, ``gateway.api.anthropic_blocks``, drops them).
    cache_hour_asked: bool = False

    @cached_property
    def cache_hour(self) -> bool:
        """Whether the client asked for an hour-long cache (``ttl: "1h"``), here or on a message, a
        part or a tool: the prefix then stays warm for the hour, and its cache writes cost the hour's
        price. Walked once per call (a long conversation is many messages)."""
        return self.cache_hour_asked or warmth.asks_an_hour(self.messages, self.params.get("tools"))


def lowers(call: ChatCall, control: Control, asked: reply.Reply) -> bool:
    """Whether the gateway may lower this call's reply: the client set it, the forwarder can send a
    lowered one, and compression is not switched off for the request."""
    return asked.asked is not None and call.lowers_reply and control.enabled is not False
