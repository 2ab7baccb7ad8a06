"""Server-sent events read from an upstream, whole events at a time.

:class:`Framer` cuts a byte stream into events in one pass: each byte is scanned once (the last
three again, for a blank line cut across two reads), and the event still open is bounded by
``max_event_bytes``. An event ends at a blank line, and SSE ends a line with CRLF, LF or CR, so every
pair of line ends (``\\n\\n``, ``\\r\\r``, ``\\r\\n\\r\\n``, ``\\n\\r\\n``, ``\\r\\n\\n``, ...) ends an event.

:class:`Events` relays an upstream's response through a framer, so an error event added after a
failure never lands inside a half-sent one.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio

from gateway.errors import GatewayError, UpstreamError
from gateway.upstream import redaction
from gateway.upstream.forward import invalid_answer
from gateway.upstream.statuses import ERROR_WORDS, answer_problem, error_in, stream_error, transport_error

log = logging.getLogger("gateway.upstream.sse")

MAX_EVENT_BYTES = 16 << 20  # one event (a whole tool call's arguments, say) up to 16 MiB by default
# A line end, then another: the second ends the event. A CR is a line end of its own only when no LF
# follows it (CRLF is one line end).
BLANK_LINE = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r)")
LOOKBACK = 3  # a blank line is at most 4 bytes: it may start 3 bytes before the newest read
LINE_END = re.compile(rb"\r\n|\r|\n")
LINE_TEXT_END = re.compile(r"\r\n|\r|\n")
DONE = b"[DONE]"


class EventTooLarge(UpstreamError):
    """An upstream event past ``max_event_bytes``: the stream is closed, the client told in-band."""

    status_code = 502
    code = "upstream_invalid_response"


class Framer:
    """Whole events out of a byte stream read in arbitrary pieces."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending = bytearray()  # the event still open
        self._scanned = 0  # bytes of it already searched for a blank line

    def feed(self, data: bytes) -> list[bytes]:
        """The events ``data`` completes, each with its blank line. Raises :class:`EventTooLarge`
        when the event still open grows past ``max_event_bytes``."""
        self._pending += data
        events = self._cut(final=False)
        if len(self._pending) > self.max_event_bytes:
            raise EventTooLarge(f"The upstream model sent a stream event larger than max_event_bytes "
                                f"({self.max_event_bytes} bytes).")
        return events

    def end(self) -> tuple[list[bytes], bytes]:
        """At the stream's end: the events still whole, and the bytes of one never finished."""
        events = self._cut(final=True)
        rest, self._pending = bytes(self._pending), bytearray()
        return events, rest

    def _cut(self, *, final: bool) -> list[bytes]:
        pending = self._pending
        ends = [m.end() for m in BLANK_LINE.finditer(pending, max(0, self._scanned - LOOKBACK))]
        if ends and not final and ends[-1] == len(pending) and pending.endswith(b"\r"):
            ends.pop()  # a CR last: an LF may follow in the next read, and belongs to this event
        self._scanned = len(pending)
        if not ends:
            return []
        events, at = [], 0
        for end in ends:
            events.append(bytes(pending[at:end]))
            at = end
        del pending[:at]
        self._scanned = len(pending)
        return events


def split(block: bytes) -> list[bytes]:
    """The events of ``block``, which holds whole events (as :class:`Events` yields them)."""
    framer = Framer(len(block) + 1)
    found = framer.feed(block)
    last, rest = framer.end()
    return found + last + ([rest] if rest.strip() else [])


def data(event: bytes) -> bytes:
    """The data of one event: the values of its ``data:`` lines, each without the one space after
    the colon, joined by LF (SSE's rule)."""
    values = [line[5:].removeprefix(b" ") for line in LINE_END.split(event) if line.startswith(b"data:")]
    return b"\n".join(values)


ERROR_NAME = re.compile(rb"(?:^|[\r\n])event:\s?error[\r\n]")


def error_of(event: bytes) -> Any | None:
    """The error an event carries, whatever its type: an object that is one (``statuses.error_in``:
    OpenAI's ``{"error": ...}``, Anthropic's ``{"type": "error", ...}``, a Response that failed), an
    ``event: error`` whatever its data, or data that is no API's event (every API's is a JSON object,
    or ``[DONE]``: plain text, a list, a string is an upstream's error text); None for any other event."""
    named = ERROR_NAME.search(event) is not None
    value = data(event).strip()
    if not named and not ERROR_WORDS.search(event) and _object_or_done(value):  # most events: no parse
        return None
    try:
        payload = json.loads(value)
    except (ValueError, RecursionError):  # not JSON: what it says is the error
        return {"message": value.decode("utf-8", errors="replace")}
    if not isinstance(payload, dict):
        return {"message": redaction.said(payload)}
    found = error_in(payload)
    return found if found is not None or not named else payload


def _object_or_done(value: bytes) -> bool:
    """Whether an event's data is what every API's events are (a JSON object, ``[DONE]``) or none."""
    return not value or value.startswith(b"{") or value == DONE


def redacted(event: bytes) -> bytes:
    """``event`` with every string of its data redacted once decoded, then encoded again (on the raw
    text, the ``n`` of an escaped ``\\n`` or Go's ``\\u003c`` would sit in front of a key and hide it);
    its other lines, and data that is not JSON, redacted as text."""
    text = event.decode("utf-8", errors="replace")
    body = text.rstrip("\r\n")
    lines = LINE_TEXT_END.split(body)
    fields = [redaction.redact(line) for line in lines if not line.startswith("data:")]
    try:
        payload = json.loads(data(event))
    except (ValueError, RecursionError):  # plain text: no escapes to hide behind
        return redaction.redact(text).encode()
    encoded = json.dumps(redaction.redacted(payload), ensure_ascii=False, separators=(",", ":"))
    return "\n".join([*fields, "data: " + encoded]).encode() + text[len(body):].encode()


def error_event(event: bytes, *, anthropic: bool = False) -> bytes:
    """``event`` as it came when it carries no error; else the error in the same shape (OpenAI's
    ``data: {"error": ...}``, or Anthropic's ``event: error``), mapped and redacted as any other."""
    error = error_of(event)
    if error is None:
        return event
    mapped = stream_error(error)
    if anthropic:
        return b"event: error\ndata: " + json.dumps(anthropic_error(mapped)).encode() + b"\n\n"
    return b"data: " + json.dumps(mapped.to_json()).encode() + b"\n\n"


def anthropic_error(mapped: GatewayError) -> dict[str, Any]:
    """A mapped error in Anthropic's shape: its own type (``overloaded_error``) kept, redacted as the
    message is."""
    return {"type": "error", "error": {"type": mapped.error_type, "message": mapped.message}}


class Events:
    """``stream_events``: an upstream's server-sent events, whole events per item (the events of one
    read, each edited), so an error event added after a failure never lands inside a half-sent one.

    The response is closed on every exit: released to the pool when read to its end; closed (so the
    upstream stops generating, and billing) when the stream fails, is cut short (the client left,
    which cancels the reader), holds an event past ``max_event_bytes``, or was never read at all
    (:meth:`aclose`, which the HTTP response calls however it ends). A failure midway raises the
    mapped ``GatewayError``. Subclasses edit each event (:meth:`edit`), add a tail at a clean end
    (:meth:`tail`) and note the end (:meth:`closed`).
    """

    def __init__(self, response: aiohttp.ClientResponse, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._response = response
        self._framer = Framer(max_event_bytes)
        self._reader = self._read()
        self._done = False
        self.ended = False  # the upstream's stream was read to its end

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._reader

    async def aclose(self) -> None:
        await self._reader.aclose()
        self._close()

    def edit(self, event: bytes) -> bytes:
        return event

    def tail(self) -> bytes:
        return b""

    def closed(self) -> None:
        """Called once, when the response is released or closed."""

    def answer(self, payload: dict[str, Any]) -> list[bytes]:
        """A whole answer (a JSON object that is no error) as this API's events, for a stream asked
        and a whole answer given; the base knows no API's events, so it is no answer."""
        raise invalid_answer()

    def _answered(self, raw: bytes) -> bytes:
        """A body that is no event stream, where one was asked: its error raised (the API's in-band
        error event, mapped as the same body unstreamed), else the answer as its events, edited as
        the upstream's would be, so none of it is lost."""
        problem = answer_problem(raw)
        if problem is not None:
            raise problem
        return b"".join(self.edit(event) for event in self.answer(json.loads(raw))) + self.tail()

    async def _read(self) -> AsyncIterator[bytes]:
        try:
            pieces = self._response.content.iter_any()
            head = await _head(pieces)
            if not is_events(head):  # a whole body (OpenRouter's {"error": ...} at 200, a page)
                raw = await self._rest(head, pieces)
                self.ended = True
                yield self._answered(raw)
                return
            if events := self._framer.feed(head):
                yield b"".join(self.edit(event) for event in events)
            async for data in pieces:
                if events := self._framer.feed(data):
                    yield b"".join(self.edit(event) for event in events)
            events, rest = self._framer.end()
            self.ended = True
            if events:
                yield b"".join(self.edit(event) for event in events)
            if rest.strip():  # an event the upstream never finished: SSE drops it
                log.warning("upstream stream ended inside an event; %d bytes dropped", len(rest))
            if last := self.tail():
                yield last
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        finally:
            self._close()

    async def _rest(self, head: bytes, pieces: AsyncIterator[bytes]) -> bytes:
        """The whole body, ``head`` first, no longer than one event may be."""
        raw = bytearray(head)
        async for data in pieces:
            raw += data
            if len(raw) > self._framer.max_event_bytes:
                raise EventTooLarge(f"The upstream model sent an answer larger than max_event_bytes "
                                    f"({self._framer.max_event_bytes} bytes).")
        return bytes(raw)

    def _close(self) -> None:
        if self._done:
            return
        self._done = True
        if self.ended:  # whole: the connection goes back to the pool
            self._response.release()
        else:  # cut short: closed, so the upstream stops
            self._response.close()
        self.closed()


# What an event stream starts with: a field (data, event, id, retry) or a comment, after blank lines.
FIELD = re.compile(rb"(?:data|event|id|retry)?:")
LONGEST_FIELD = len(b"retry:")


async def _head(pieces: AsyncIterator[bytes]) -> bytes:
    """The body's first bytes, enough to tell an event stream (:func:`is_events`), or all of it."""
    head = b""
    async for data in pieces:
        head += data
        start = head.lstrip()
        if len(start) >= LONGEST_FIELD or LINE_END.search(start):
            break
    return head


def is_events(head: bytes) -> bool:
    """Whether a body starting ``head`` is an event stream (an empty one too): every stream starts
    with a field or a comment; JSON, a page or an error's text does not."""
    start = head.lstrip()
    return not start or FIELD.match(start) is not None


async def closed(stream: Any) -> None:
    """Close ``stream`` (an ``Events``, an async generator) even while a cancellation is pending."""
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        with anyio.CancelScope(shield=True):
            try:
                await closer()
            except Exception:  # an already broken stream may fail again on close; nothing is left to do
                log.debug("closing a stream failed", exc_info=True)
