"""An upstream that streams server-sent events badly on purpose, for both wire formats the relays
speak (``/v1/chat/completions`` and ``/v1/messages``), recording when each client went away.

Written on raw asyncio streams (as ``fake_upstream``) so it can cut an event in half or hold its
headers back. The upstream model name chooses the behaviour:

* ``half``: two whole events, then half of a third, then the connection is dropped (a reset);
* ``late``: the status line only after ``LATE_S``, then an event every 0.1 s for a minute;
* ``slow``: an event every 0.1 s for a minute, at once;
* ``huge``: one event that never ends, 16 KiB every 0.1 s for a minute;
* ``mixed``: a short whole stream whose events end in ``\n\r\n`` (LF, then CRLF), and a clean end;
* anything else: a short whole stream and a clean end.

``Seen.closed`` is set when the client closed the connection (or the write failed) of a ``late``,
``slow`` or ``huge`` stream.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

LATE_S = 0.6
LIFETIME_S = 60.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    closed: threading.Event = field(default_factory=threading.Event)


@dataclass
class SseUpstream:
    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    def start(self) -> SseUpstream:
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        )
        self.port = self.server.sockets[0].getsockname()[1]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def find(self, marker: str) -> Seen:
        [found] = [s for s in list(self.seen) if marker in json.dumps(s.body)]
        return found

    def closed(self, marker: str, timeout: float = 30.0) -> bool:
        """Whether the client of the request holding ``marker`` left, waiting for it up to ``timeout``
        (half the upstream's own ``LIFETIME_S``: a stream nobody closes runs on past it)."""
        deadline = time.monotonic() + timeout
        while not (found := [s for s in list(self.seen) if marker in json.dumps(s.body)]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return found[0].closed.wait(max(0.0, deadline - time.monotonic()))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            seen = Seen(lines[0].split(" ")[1], headers, body)
            self.seen.append(seen)
            await self._answer(seen, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(self, seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = str(seen.body.get("model", ""))
        anthropic = seen.path.split("?")[0].endswith("/messages")
        if mode == "late":
            await asyncio.sleep(LATE_S)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        if mode == "half":
            first, second, third = (_event(anthropic, i) for i in range(3))
            _chunk(writer, first + second + third[: len(third) // 2])
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.transport.abort()
            return
        if mode in ("late", "slow", "huge"):
            await _trickle(seen, reader, writer, anthropic, huge=mode == "huge")
            return
        for piece in [_event(anthropic, i) for i in range(3)] + [_last(anthropic)]:
            _chunk(writer, piece.replace(b"\n\n", b"\n\r\n") if mode == "mixed" else piece)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _trickle(
    seen: Seen, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, anthropic: bool, huge: bool
) -> None:
    gone = asyncio.ensure_future(reader.read(1))  # b"" once the client closes
    try:
        if huge:
            _chunk(writer, b"data: ")
        for i in range(int(LIFETIME_S / 0.1)):
            _chunk(writer, b"x" * 16384 if huge else _event(anthropic, i))
            await writer.drain()
            await asyncio.wait([gone], timeout=0.1)
            if gone.done() or writer.is_closing():
                break
    except ConnectionError:
        pass
    finally:
        seen.closed.set()
        gone.cancel()


def _event(anthropic: bool, i: int) -> bytes:
    if anthropic:
        if i == 0:
            start = {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "upstream-name",
                    "content": [],
                    "usage": {"input_tokens": 3, "output_tokens": 1},
                },
            }
            return b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n"
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"w{i} "}}
        return b"event: content_block_delta\ndata: " + json.dumps(delta).encode() + b"\n\n"
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "upstream-name",
        "choices": [{"index": 0, "delta": {"content": f"w{i} "}}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _last(anthropic: bool) -> bytes:
    if anthropic:
        return b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    return b"data: [DONE]\n\n"


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
