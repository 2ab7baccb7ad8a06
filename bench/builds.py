"""How multi-turn builds behave at size (issue #29): the figures the tests only bound.

    .venv/bin/python -m bench.builds            # every figure, ~2-4 min on 2 cores
    .venv/bin/python -m bench.builds --quick    # smaller sizes, ~30 s

In this process, on ``gateway.conversation.history.History`` with a pool of worker processes, as the
gateway runs it; texts are real (the dev split's agent runs, the haystack books):

* cold vs warm build of a 300-step agent session (tool steps of the dev runs, one after another):
  seconds, forms computed, and whether both send the same bytes;
* the event loop's worst stall (wall time between 2 ms heartbeats) while an 8 MB message and a
  5,000-block agent body are prepared;
* the reset scan's scaling: a cost-mode chat of 1,500 and 3,000 one-line turns (nothing can shrink);
* doubling (issue #35: nothing on the request path superlinear): a real agent session of N and 2N
  steps through a 32k window, each step's request sent in turn to one instance (warm: what a
  replica that served the conversation does; the last 20 requests' mean) and the last one alone to a
  new instance (cold: a restarted replica without ``form_cache_url``), seconds and the 2N / N ratio;
* the regexes on pathological runs: a reset's query (``task.query``) with a 50 kB hex run in the
  agent's arguments, ``grep.file_of`` on a
  20,000-character run of slashes.

Timings on a shared machine are distorted: read them beside the load printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.agents import trajectories
from bench.data import books
from gateway.compress.compressor import Compressor, Outcome
from gateway.compress.policy import Control, Target
from gateway.config import MixprSettings
from gateway.conversation import task
from gateway.conversation.history import History, Request
from gateway.run.workers import Workers
from mixpr.kinds.grep import file_of

Message = dict[str, Any]


def agent_session(steps: int) -> list[Message]:
    """The dev runs' assistant-call and tool-result steps, one after another, ids renumbered."""
    runs = trajectories()
    messages: list[Message] = [runs[0].messages[0], next(m for m in runs[0].messages if m["role"] == "user")]
    pairs = [(a, t) for run in runs for a, t in zip(run.messages, run.messages[1:], strict=False)
             if a["role"] == "assistant" and a.get("tool_calls") and t["role"] == "tool"]
    for n in range(steps):
        assistant, tool = pairs[n % len(pairs)]
        call = {**assistant["tool_calls"][0], "id": f"call_{n}"}
        messages += [{**assistant, "tool_calls": [call]}, {**tool, "tool_call_id": f"call_{n}"}]
    return messages


def chat(turns: int) -> list[Message]:
    words = books()[0].split()
    messages: list[Message] = []
    for n in range(turns):
        line = " ".join(words[n * 8:(n + 1) * 8])
        messages += [{"role": "user", "content": line}, {"role": "assistant", "content": line[::-1]}]
    return [*messages, {"role": "user", "content": "And then?"}]


async def _history(timeout_s: float = 60) -> tuple[History, Compressor]:
    compressor = Compressor(Workers(workers=2, executor="process", timeout_s=timeout_s), route_cache_size=16)
    await compressor.start(with_router=False)
    return History(compressor, cache_bytes=256 * 1024 * 1024), compressor


def _request(messages: list[Message], window: int = 128_000, **mixpr: Any) -> Request:
    settings = MixprSettings(router="heuristic", **mixpr)
    return Request(messages, None, Target("gpt-4o-mini", window, 1024), settings, Control(), None)


async def _timed(prepare: Callable[[], Awaitable[Outcome]]) -> tuple[Outcome, float, float]:
    """The outcome, its seconds, and the loop's worst stall meanwhile (wall ms between heartbeats)."""
    stall, done = 0.0, asyncio.Event()

    async def heartbeat() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            stall, last = max(stall, now - last - 0.002), now

    beating = asyncio.create_task(heartbeat())
    started = time.perf_counter()
    outcome = await prepare()
    seconds = time.perf_counter() - started
    done.set()
    await beating
    return outcome, seconds, stall * 1000


async def cold_and_warm(steps: int) -> None:
    messages = agent_session(steps)
    history, compressor = await _history()
    try:
        cold, cold_s, cold_stall = await _timed(lambda: history.prepare(_request(messages)))
        warm, warm_s, _ = await _timed(lambda: history.prepare(_request(messages)))
    finally:
        compressor.close()
    print(f"{steps}-step agent session ({len(messages)} messages): cold {cold_s:.2f} s "
          f"({cold.new_forms} forms, route {cold.route}), warm {warm_s:.3f} s ({warm.new_forms} forms); "
          f"same bytes: {cold.messages == warm.messages}; worst loop stall while cold {cold_stall:.1f} ms")


async def doubling(steps: int, window: int = 32_000) -> None:
    """Seconds of the last request of an N- and a 2N-step session, warm and cold, and the ratios."""
    figures: dict[str, list[float]] = {"warm": [], "cold": []}
    for n in (steps, 2 * steps):
        messages = agent_session(n)
        ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"][1:] + [len(messages)]
        history, compressor = await _history(timeout_s=300)
        try:
            last: list[float] = []  # a request with a reset costs more: the last 20 requests' mean
            for end in ends[:-1]:
                request = _request(messages[:end], window)
                _, seconds, _ = await _timed(lambda h=history, r=request: h.prepare(r))
                last.append(seconds)
            warm, warm_s, _ = await _timed(lambda h=history, m=messages: h.prepare(_request(m, window)))
            warm_s = (sum(last[-19:]) + warm_s) / 20
        finally:
            compressor.close()
        history, compressor = await _history(timeout_s=300)
        try:
            cold, cold_s, _ = await _timed(lambda h=history, m=messages: h.prepare(_request(m, window)))
        finally:
            compressor.close()
        figures["warm"].append(warm_s)
        figures["cold"].append(cold_s)
        print(f"{n}-step session through {window // 1000}k: last 20 requests warm {warm_s:.3f} s each "
              f"({warm.new_forms} new forms), cold {cold_s:.2f} s ({cold.new_forms} forms, "
              f"{cold.resets} resets); same bytes: {warm.messages == cold.messages}")
    for name, (small, large) in figures.items():
        print(f"{name}: {2 * steps} / {steps} steps = {large / small:.2f} (linear: 2)")


async def loop_stalls(blocks: int) -> None:
    book = "\n".join(books())
    document = (book * (8_000_000 // len(book) + 1))[:8_000_000]
    cases = {"8 MB message": [{"role": "user", "content": document + "\n\nWho wrote the letter?"}],
             f"{blocks}-block agent body": agent_session(blocks // 2)}
    for name, messages in cases.items():
        history, compressor = await _history(timeout_s=300)
        try:
            outcome, seconds, stall = await _timed(
                lambda h=history, m=messages: h.prepare(_request(m, 1_000_000)))
        finally:
            compressor.close()
        print(f"{name}: prepared in {seconds:.2f} s ({outcome.action}); worst loop stall {stall:.1f} ms")


async def scan_scaling(turns: tuple[int, int]) -> None:
    times = []
    for n in turns:
        history, compressor = await _history()
        try:
            _, seconds, _ = await _timed(
                lambda h=history, n=n: h.prepare(_request(chat(n), budget_tokens=2_000)))
        finally:
            compressor.close()
        times.append(seconds)
        print(f"cost-mode chat of {n} one-line turns: built in {seconds:.2f} s (cold)")
    print(f"ratio {turns[1]} / {turns[0]} turns: {times[1] / times[0]:.2f} (linear: 2)")


def regexes() -> None:
    hexed = [{"role": "user", "content": "check"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "c", "type": "function", "function": {"name": "sha", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c", "content": "ok"},
             {"role": "assistant", "content": os.urandom(25_000).hex(), "tool_calls": [
                 {"id": "d", "type": "function", "function": {"name": "sha", "arguments": json.dumps(
                     {"digest": os.urandom(25_000).hex()})}}]}]
    started = time.perf_counter()
    task.query(hexed, 3)
    print(f"task.query with 50 kB hex runs: {(time.perf_counter() - started) * 1000:.1f} ms")
    started = time.perf_counter()
    file_of("/" * 20_000 + " x")
    elapsed = (time.perf_counter() - started) * 1000
    print(f"grep.file_of on a 20,000-character run of slashes: {elapsed:.1f} ms")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--only", default="regexes,cold,loop,scan,doubling",
                        help="comma-separated parts (all five)")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if "regexes" in parts:
        regexes()
    if "cold" in parts:
        asyncio.run(cold_and_warm(60 if args.quick else 300))
    if "loop" in parts:
        asyncio.run(loop_stalls(1_000 if args.quick else 5_000))
    if "scan" in parts:
        asyncio.run(scan_scaling((300, 600) if args.quick else (1_500, 3_000)))
    if "doubling" in parts:
        asyncio.run(doubling(60 if args.quick else 150))
    print(json.dumps({"load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
