"""An upstream on 127.0.0.1 that answers each request with whatever a test scripted for its model.

Every wire format the relays speak (``/chat/completions``, ``/responses``, ``/responses/compact``,
``/v1/messages``, ``/embeddings``) is served the same way: the upstream model name the gateway sends
picks an :class:`Answer` (status, content type, body bytes), so a test can put any bytes, of any
shape and status, in front of every route, and a property test can script a new answer per example.
The key each request came with is kept (``keys``), as some upstreams quote it back.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"


def json_answer(status: int, payload: object) -> Answer:
    return Answer(status, json.dumps(payload).encode())


def sse_answer(*events: bytes, status: int = 200) -> Answer:
    """A stream of whole events (each given with its blank line)."""
    return Answer(status, b"".join(events), "text/event-stream")


@dataclass
class AnsweringUpstream:
    answers: dict[str, Answer] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)  # what each request sent, in order
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, model: str, answer: Answer) -> None:
        with self._lock:
            self.answers[model] = answer

    def start(self) -> AnsweringUpstream:
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        stop_serving(self.server, self.loop)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                fields = (line.partition(":") for line in lines[1:] if line)
                headers = {k.strip().lower(): v.strip() for k, _, v in fields}
                body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))) or b"{}")
                self.paths.append(lines[0].split(" ")[1])
                self.bodies.append(body)
                with self._lock:
                    answer = self.answers.get(str(body.get("model")), Answer(404, b'{"error": "unscripted"}'))
                writer.write(f"HTTP/1.1 {answer.status} Status\r\nContent-Type: {answer.content_type}\r\n"
                             f"Content-Length: {len(answer.body)}\r\n\r\n".encode() + answer.body)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def stop_serving(server: asyncio.Server, loop: asyncio.AbstractEventLoop) -> None:
    """Close ``server`` and its open connections on ``loop`` (run in its own thread), then stop the loop.
    A connection's task left pending was closed later by the garbage collector, on a closed loop, and
    its unraisable error ("never awaited") failed whichever test of the xdist worker was running then."""
    asyncio.run_coroutine_threadsafe(_close(server), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)


async def _close(server: asyncio.Server) -> None:
    server.close()
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
