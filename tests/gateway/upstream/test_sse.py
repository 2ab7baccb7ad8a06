"""Whole server-sent events out of an upstream's bytes (``gateway.upstream.sse``), read in any pieces:
every line ending SSE allows (CRLF, LF, CR, mixed), one pass over the bytes, and one event bounded
by ``max_event_bytes`` with a clear error past it. (Through a gateway: ``test_relay_streams``.)"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.upstream import chat_relay, shapes, sse

ENDINGS = [b"\n", b"\r\n", b"\r"]


def _framed(pieces: list[bytes], limit: int = sse.MAX_EVENT_BYTES) -> tuple[list[bytes], bytes]:
    framer = sse.Framer(limit)
    events = [event for piece in pieces for event in framer.feed(piece)]
    tail, rest = framer.end()
    return events + tail, rest


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n", b"\r\r\n", b"\n\r"])
def test_every_blank_line_ends_an_event(end: bytes) -> None:
    first, second = b"event: a" + end, b"data: {}" + end
    assert _framed([first + second + b"data: open"]) == ([first, second], b"data: open")


def test_a_cr_at_the_end_of_a_read_waits_for_a_possible_lf() -> None:
    framer = sse.Framer()
    assert framer.feed(b"data: 1\r\n\r") == []  # the LF that completes CRLF may come next
    assert framer.feed(b"\ndata: 2") == [b"data: 1\r\n\r\n"]
    assert framer.end() == ([], b"data: 2")


def test_a_stream_ending_on_a_cr_keeps_its_last_event() -> None:
    assert _framed([b"data: 1\r\r"]) == ([b"data: 1\r\r"], b"")


def _event(lines: list[tuple[bytes, bytes]], blank: bytes) -> bytes:
    if lines[-1][1] == b"\r" and blank == b"\n":  # that is one line end, CRLF: no blank line
        blank = b"\r\n"
    return b"".join(text + end for text, end in lines) + blank


LINE = st.tuples(st.sampled_from([b"data: ", b"event: ", b": ", b"id: "]),
                 st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
                 st.sampled_from(ENDINGS)).map(lambda t: (t[0] + t[1], t[2]))
EVENT = st.tuples(st.lists(LINE, min_size=1, max_size=4), st.sampled_from(ENDINGS)).map(lambda t: _event(*t))


@settings(max_examples=300, deadline=None)
@given(events=st.lists(EVENT, max_size=8), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_any_split_of_a_stream_gives_its_events(events: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(events)
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert _framed(pieces) == (events, b"")
    assert _framed([stream]) == (events, b"")


def test_an_event_past_max_event_bytes_is_an_upstream_error() -> None:
    framer = sse.Framer(1024)
    assert framer.feed(b"data: " + b"x" * 1000) == []
    with pytest.raises(sse.EventTooLarge) as caught:
        framer.feed(b"x" * 100)
    assert caught.value.status_code == 502 and caught.value.code == "upstream_invalid_response"
    assert "max_event_bytes" in str(caught.value)


def test_events_under_the_bound_pass_however_many() -> None:
    event = b"data: " + b"x" * 900 + b"\n\n"
    assert _framed([event] * 50, limit=1024) == ([event] * 50, b"")


class _Content:
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def iter_any(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


class _Response:
    """What ``Events`` reads of an aiohttp response: its content, release and close."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.content = _Content(pieces)
        self.released = self.closed = False

    def release(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


async def _read_all(events: sse.Events) -> bytes:
    return b"".join([block async for block in events])


def _seconds_to_read(body: bytes, piece: int = 256) -> float:
    """Best of three: ``body`` arriving ``piece`` bytes at a time, read whole."""
    pieces = [body[i:i + piece] for i in range(0, len(body), piece)]
    best = float("inf")
    for _ in range(3):
        events = sse.Events(_Response(pieces))
        start = time.perf_counter()
        assert asyncio.run(_read_all(events)) == body
        best = min(best, time.perf_counter() - start)
    return best


def test_one_long_event_costs_what_many_short_ones_do() -> None:
    """The same bytes in the same reads, as one 512 KiB event or as 1 KiB events: a rescan of the
    whole open event per read (as before) made the long one 40 times slower; linear, about the same."""
    size = 1 << 19
    long = _seconds_to_read(b"data: " + b"x" * (size - 8) + b"\n\n")
    short = _seconds_to_read((b"data: " + b"x" * (1024 - 8) + b"\n\n") * (size // 1024))
    assert long / short < 2.5, (long, short)


def test_an_event_too_large_closes_the_upstream_response() -> None:
    response = _Response([b"data: " + b"x" * 4096] * 10)
    events = sse.Events(response, max_event_bytes=8192)
    with pytest.raises(sse.EventTooLarge):
        asyncio.run(_read_all(events))
    assert response.closed and not response.released


def test_model_renaming_keeps_everything_else() -> None:
    renamed = shapes.renamed(b'{"a": {"model": "x"}, "model" : "up", "model":"again"}', shapes.CHAT, "m")
    # Duplicates too: a client's parser keeps the last.
    assert renamed == b'{"a": {"model": "x"}, "model" : "m", "model":"m"}'
    # Members after the last "model" are never read, so a long answer after its name costs nothing.
    unread = b'{"model": "up", "choices": [' + b"{" * 5000
    assert shapes.renamed(unread, shapes.CHAT, "m").startswith(b'{"model": "m"')
    assert shapes.renamed(b'{"n": ' + b"9" * 5000 + b', "model": "up"}', shapes.CHAT, "m").endswith(b'"m"}')
    assert shapes.renamed(b'{"model": "up"', shapes.CHAT, "m") in (b'{"model": "m"', b'{"model": "up"')
    assert shapes.renamed(b"not json", shapes.CHAT, "m") == b"not json"
    deep = b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b', "model": "up"}'
    assert shapes.renamed(deep, shapes.CHAT, "m") == deep  # too deep to read: left as sent
    start = b'data: {"type":"message_start","message":{"model":"up","content":[{"input":{"model":"x"}}]}}\n\n'
    assert shapes.renamed_event(start, shapes.MESSAGE_EVENT, "m") == start.replace(b'"up"', b'"m"')
    for end in (b"\n", b"\r\n", b"\r"):
        split = b'event: x' + end + b'data: {"model":' + end + b'data: "up", "a": {"model": "x"}}' + end + end
        assert shapes.renamed_event(split, shapes.CHAT, "m") == split.replace(b'"up"', b'"m"')
        one = b'event: x' + end + b'data: {"model": "up"}' + end + end
        assert shapes.renamed_event(one, shapes.CHAT, "m") == one.replace(b'"up"', b'"m"')


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_relayed_chat_events_are_read_whatever_their_line_ends(end: bytes) -> None:
    """The Responses API reads the chat relay's events (``chat_relay.chunks``) and the usage of the
    last one (``on_usage``): with any line end SSE allows, and a data value split over two lines."""
    events = [b'data: {"id":"c1","choices":[{"delta":{"content":"hi"}}]}' + end + end,
              b'event: chunk' + end + b'data: {"id":"c1","choices":[],' + end
              + b'data: "usage":{"total_tokens":3}}' + end + end,
              b"data: [DONE]" + end + end]
    usage: list[dict] = []

    async def read() -> list[dict]:
        relayed = chat_relay.ChatEvents(_Response([b"".join(events)]), "m", usage.append)
        return [chunk async for chunk in chat_relay.chunks(relayed)]

    assert asyncio.run(read()) == [{"id": "c1", "choices": [{"delta": {"content": "hi"}}]},
                                   {"id": "c1", "choices": [], "usage": {"total_tokens": 3}}]
    assert usage == [{"total_tokens": 3}]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["model", "m", "x"]), inner,
                                                               max_size=4),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(obj=st.dictionaries(st.sampled_from(["model", "id", "choices", "usage"]), JSON, max_size=4),
       indent=st.sampled_from([None, 0, 2]), ascii_only=st.booleans())
def test_only_the_top_level_model_string_is_renamed(obj: dict, indent: int | None, ascii_only: bool) -> None:
    raw = json.dumps(obj, indent=indent, ensure_ascii=ascii_only).encode()
    renamed = shapes.renamed(raw, shapes.CHAT, "alias")
    expected = {**obj, "model": "alias"} if isinstance(obj.get("model"), str) else obj
    assert json.loads(renamed) == expected
    if expected is obj:
        assert renamed == raw


def test_an_error_event_is_mapped_and_redacted_and_any_other_left_as_it_came() -> None:
    """vLLM's ``data: {"error": ...}`` after a chunk and Anthropic's ``event: error`` (issue 47): the
    same mapping and redaction as an error status, each in its own shape; other events byte for byte."""
    key = "gsk_" + "Q7w" * 16
    chunk = b'data: {"choices": [{"delta": {"content": "an \\"error\\" word"}}]}\n\n'
    assert sse.error_event(chunk) == chunk
    error = {"error": {"message": f"key {key} refused", "type": "BadRequestError"}}
    openai_event = b"data: " + json.dumps(error).encode() + b"\n\n"
    mapped = json.loads(sse.data(sse.error_event(openai_event)))
    assert key not in str(mapped) and mapped["error"]["type"] == "BadRequestError"
    anthropic = {"type": "error", "error": {"type": "overloaded_error", "message": f"busy, key {key}"}}
    event = b"event: error\ndata: " + json.dumps(anthropic).encode() + b"\n\n"
    out = sse.error_event(event, anthropic=True)
    assert out.startswith(b"event: error\n") and key.encode() not in out
    assert json.loads(sse.data(out))["error"]["type"] == "overloaded_error"
    text = b"event: error\ndata: worker at 10.2.3.4 failed with key " + key.encode() + b"\n\n"
    out = sse.error_event(text)  # plain text, named an error
    assert key.encode() not in out and b"10.2.3.4" not in out and json.loads(sse.data(out))["error"]
