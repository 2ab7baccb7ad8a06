"""Reading a request's JSON body within limits, the same for every API.

What a body may cost is bounded before any API sees it: its media type (only
``application/json``, so a web page cannot send one cross-site without a CORS preflight), its
size (``max_body_bytes``), the bytes held across requests (counted as they arrive, so a client
that declares a large body and sends nothing holds nothing), the time it may take to arrive
(``body_timeout_s`` without a byte, or slower than ``min_body_bytes_per_s`` on average: a 408 and
the connection closed), and its shape (strict JSON, at most ``MAX_DEPTH`` deep, at most
``max_body_objects`` objects and arrays, so the work on it stays small and linear).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from gateway.config import GeneralSettings
from gateway.edge.admission import held_bytes
from gateway.errors import BadRequest, PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from gateway.run import offload

MAX_DEPTH = 64  # JSON nesting; OpenAI's deepest structures (tool schemas) stay far below
JSON_MEDIA_TYPE = "application/json"
_SURROGATE = re.compile("[\ud800-\udfff]")
# Where a lone surrogate can come from: an escape, or its UTF-8 bytes (json.loads decodes bytes with
# surrogatepass). A body without either needs no search of its strings.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


async def read_json(request: Request, settings: GeneralSettings) -> Any:
    """The request body as strict JSON, read within ``settings``' limits."""
    check_media_type(request.headers.get("content-type"))
    raw = await read_body(request, settings)
    # Parsing and checking a body is per-object work: a big one is done off the loop.
    big = len(raw) > offload.INLINE_JSON_BYTES
    return await offload.inline_or_run(big, parse_json, raw, max_objects=settings.max_body_objects)


def check_media_type(content_type: str | None) -> None:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        shown = f"'{media_type}'" if media_type else "none"
        raise UnsupportedMediaType(f"The request body must be JSON sent with 'Content-Type: "
                                   f"{JSON_MEDIA_TYPE}' (got {shown}).")


async def read_body(request: Request, settings: GeneralSettings) -> bytes:
    """The body's bytes, each counted toward ``max_inflight_body_bytes`` as it arrives (until the
    response is sent); a declared length over the limit is refused before a byte is read."""
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    held = held_bytes(request.scope)
    chunks, size = [], 0
    async for chunk in _arriving(request, settings.body_timeout_s, settings.min_body_bytes_per_s):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if held is not None:
            held.take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


async def _arriving(request: Request, timeout_s: float, min_rate: int) -> AsyncIterator[bytes]:
    """The body's chunks; 408 once none came for ``timeout_s`` or the average rate fell under
    ``min_rate`` bytes/s after the first ``timeout_s`` (Apache's mod_reqtimeout rule): a stalled or
    trickling upload holds its connection for a bounded time."""
    loop = asyncio.get_running_loop()
    started = last = loop.time()
    received = 0
    stream = request.stream()
    while True:
        deadline = min(last + timeout_s, started + timeout_s + received / min_rate)
        try:
            async with asyncio.timeout_at(deadline):
                chunk = await anext(stream)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise _too_slow(timeout_s, min_rate) from None
        last, received = loop.time(), received + len(chunk)
        yield chunk


def parse_json(raw: bytes, *, max_objects: int) -> Any:
    """Strict JSON: no NaN/Infinity or numbers too large for a float, no lone surrogates, nesting
    at most ``MAX_DEPTH`` deep, at most ``max_objects`` objects and arrays.

    Python's parser accepts the first three, but none survives the way on: the upstream call's
    encoder refuses NaN and infinities, UTF-8 cannot carry a lone surrogate, and deep nesting
    exhausts recursion later. The count bounds the work every later step does per object.
    """
    try:
        value = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotJson as exc:
        raise BadRequest(str(exc)) from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError:  # includes UnicodeDecodeError
        raise BadRequest("We could not parse the JSON body of your request.") from None
    containers = _containers(value, max_objects)
    if _MAYBE_SURROGATE.search(raw) or b"\x00" in raw:  # NUL: UTF-16 or -32, decoded likewise
        _check_surrogates(value, containers)
    return value


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"The JSON body contains {name}, which is not valid JSON.")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotJson(f"The JSON body contains the number {text[:40]}, which is too large to be a "
                       f"finite number.")
    return value


def _containers(value: Any, limit: int) -> list[Any]:
    """Every object and array in ``value``, level by level; 400 past ``MAX_DEPTH`` or ``limit``."""
    level = [value] if isinstance(value, dict | list) else []
    found: list[Any] = []
    depth = 1
    while level:
        if depth > MAX_DEPTH:
            raise _too_deep()
        found += level
        if len(found) > limit:
            raise BadRequest(f"The JSON body has more than {limit} objects and arrays (messages, content "
                             f"parts, tool definitions ...), this gateway's limit "
                             f"(general_settings.max_body_objects).")
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, dict | list)]
        depth += 1
    return found


def _check_surrogates(value: Any, containers: list[Any]) -> None:
    strings = [value] if isinstance(value, str) else []
    for item in containers:
        strings += [s for s in (item if isinstance(item, list) else [*item, *item.values()])
                    if isinstance(s, str)]
    if any(_SURROGATE.search(s) for s in strings):
        raise BadRequest("The JSON body contains a lone surrogate (\\ud800-\\udfff), "
                         "which is not valid Unicode.")


def _too_deep() -> BadRequest:
    return BadRequest(f"The JSON body is nested more than {MAX_DEPTH} levels deep.")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than this gateway's limit of {limit} bytes "
                           f"(general_settings.max_body_bytes).")


def _too_slow(timeout_s: float, min_rate: int) -> RequestTimeout:
    return RequestTimeout(f"The request body did not arrive in time: no byte for {timeout_s:g} s, or "
                          f"slower than {min_rate} bytes/s on average (general_settings.body_timeout_s, "
                          f"min_body_bytes_per_s).")
