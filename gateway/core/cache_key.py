"""The ``prompt_cache_key`` of a conversation, for OpenAI-style upstreams (issue 30).

OpenAI routes a request to a cache machine by a hash of its first ~256 tokens plus the request's
``prompt_cache_key``; requests of one conversation that land on different machines miss the cache.
So when the client sent no key, the gateway sets one per conversation: from the session the client
names (the first of :data:`SESSION_HEADERS` it sends: Claude Code's, Codex's, a generic one), else
from the conversation's start (its system prompt and first user message), which every later request
of the conversation repeats. Either is a MAC (keyed BLAKE2b) under a secret of the deployment (derived
from ``deployment_secret``, else ``master_key``), so the key tells the provider nothing it could check a
guess against; every replica with the same config computes the same key. With neither, the secret is
this install's own, random (``gateway.core.install_secret``), never a constant anyone could compute.

It promises nothing about hits: the provider may still route elsewhere (OpenAI spills a key past
about 15 requests a minute to more machines), and two conversations that start alike and name no
session share a key, which only means they share a machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from gateway.core.install_secret import install_secret

SESSION_HEADERS = ("x-claude-code-session-id", "session_id", "session-id", "x-session-id")
RAW_SESSION_HEADERS = tuple(name.encode() for name in SESSION_HEADERS)
PREFIX = "mixpr-"
HEX_CHARS = 32
MAX_SESSION_CHARS = 256
LEADING_ROLES = ("system", "developer")
HASHED_CHARS = 16_384  # of each text that identifies a conversation's start
HASHED_PARTS = 16


def session(headers: Mapping[str, str]) -> str | None:
    """The conversation the client names: the first of ``SESSION_HEADERS`` it sent, if any."""
    raw = getattr(headers, "raw", None)  # Starlette's: one pass over the raw list, not four lookups
    sent = dict(raw) if raw is not None else {k.lower().encode(): v.encode() for k, v in headers.items()}
    for name in RAW_SESSION_HEADERS:
        value = sent.get(name, b"").strip()
        if value:
            return value[:MAX_SESSION_CHARS].decode("latin-1")
    return None


def secret(master_key: str | None, configured: str | None = None) -> bytes:
    """The MAC key: from the deployment's secret when the config names one (``deployment_secret``,
    else ``master_key``: shared by its replicas), else from this install's own."""
    if configured:
        source = b"deployment\0" + configured.encode()
    elif master_key:
        source = master_key.encode()  # as before: keys stay as they were for configs with a master key
    else:
        source = b"install\0" + install_secret()
    return hashlib.blake2b(b"mixpr prompt_cache_key\0" + source, digest_size=32).digest()


def key(salt: bytes, named: str | None, messages: list[dict[str, Any]]) -> str:
    """The conversation's key: from its session when the client names one, else from its start
    (keyed BLAKE2b, a MAC as HMAC is, in one pass)."""
    source = b"session\0" + named.encode() if named else b"start\0" + _start(messages)
    return PREFIX + hashlib.blake2b(source, key=salt, digest_size=HEX_CHARS // 2).hexdigest()


def _start(messages: list[dict[str, Any]]) -> bytes:
    """The leading system prompt(s) and the first user message, as every later turn repeats them;
    each cut to ``HASHED_CHARS`` (OpenAI routes by the first ~256 tokens anyway): constant work per
    request, however long its first message."""
    system = [_text(m.get("content")) for m in messages if m.get("role") in LEADING_ROLES]
    first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return "\1".join([*system[:HASHED_PARTS], "\2", first_user]).encode("utf-8", "surrogatepass")


def _text(content: Any) -> str:
    """A message's content as text: a string's start, or the start of each of its first parts' text
    (an image part counts by its type: its data is not read)."""
    if isinstance(content, str):
        return content[:HASHED_CHARS]
    parts = content[:HASHED_PARTS] if isinstance(content, list) else []
    return "\0".join(_part(p)[:HASHED_CHARS] for p in parts)


def _part(part: Any) -> str:
    return str(part.get("text") or part.get("type")) if isinstance(part, dict) else ""
