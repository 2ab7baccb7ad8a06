"""Soak (issue #9): mixed traffic for minutes while compression workers are killed; nothing may be lost.

Three processes on 127.0.0.1: the recording upstream (tests/gateway/fake_upstream.py), the gateway
(``python -m gateway``, 2 compression workers) and this client, which sends requests at a fixed
rate (open loop, so a slow gateway cannot slow the offered load down): 95% short, 5% long (128k,
256k, 512k or 1M tokens, built once), 10% streamed, and a third of the streams hung up after the
first chunk. Every ``--kill-every`` seconds one compression worker gets SIGKILL (the OOM killer).

Reported: requests sent; answered by status (and error code); lost (a connection error, a timeout,
or any status but 200 and a 503 with Retry-After); p50/p99 latency of short requests; the
gateway's RSS sampled each second: peak, after warm-up and at the end. Done means 0 lost and the
RSS flat after warm-up. Last, a probe sends short requests while eight uploads that declared
64 MiB stall (they must not be refused), and reports how the stalled uploads end (408).

    .venv/bin/python -m bench.soak --minutes 10
    .venv/bin/python -m bench.soak --minutes 2 --json out/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.gateway_latency import big_prompt, free_port, start_gateway, start_upstream, summarize

SHORT = [{"role": "user", "content": "Say hello in one word."}]
LONG_TOKENS = (128_000, 256_000, 512_000, 1_000_000)
WINDOW = 100_000  # every long prompt needs compressing
CLIENT_TIMEOUT_S = 300
BODY_BYTES, INFLIGHT_BODY_BYTES = 64 * 1024 * 1024, 512 * 1024 * 1024  # the gateway's defaults


@dataclass
class Tally:
    sent: int = 0
    answered: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: collections.Counter[str] = field(default_factory=collections.Counter)
    hung_up: int = 0
    short_ms: list[float] = field(default_factory=list)
    shed_ms: list[float] = field(default_factory=list)
    long_ms: list[float] = field(default_factory=list)


def write_config(folder: Path, upstream: str, workers: int) -> Path:
    def entry(name: str, **extra: Any) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {"model": f"openai/{name}", "api_base": upstream,
                                                       "api_key": "k"}, **extra}

    config = folder / "config.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "model_list": [entry("echo"), entry("big", model_info={"max_input_tokens": WINDOW})],
        "mixpr_settings": {"budget_tokens": 4000, "router": "heuristic"},
        "general_settings": {"compression_workers": workers, "max_body_bytes": BODY_BYTES,
                             "max_inflight_body_bytes": INFLIGHT_BODY_BYTES},
    }))
    return config


def compression_workers(gateway: psutil.Process) -> list[psutil.Process]:
    """The gateway's pool processes: spawned ones are its children; since the fork server (issue 59) they
    are the fork server's children, which share its command line (not multiprocessing's resource
    tracker, nor the fork server itself)."""
    found = []
    for child in gateway.children():
        try:
            command = " ".join(child.cmdline())
            if "spawn_main" in command:
                found.append(child)
            elif "forkserver" in command:
                found.extend(child.children())
        except psutil.NoSuchProcess:
            pass
    return found


async def one_request(session: aiohttp.ClientSession, url: str, payload: bytes, *, kind: str,
                      stream: bool, hang_up: bool, tally: Tally) -> None:
    tally.sent += 1
    started = time.perf_counter()
    try:
        async with session.post(url, data=payload, headers={"content-type": "application/json"}) as response:
            if stream and response.status == 200:
                async for line in response.content:
                    if hang_up and line.startswith(b"data: {"):
                        tally.hung_up += 1
                        return  # leaving the block closes the connection mid-stream
                    if line.startswith(b"data: [DONE]"):
                        break
                else:
                    tally.lost["stream ended without [DONE]"] += 1
                    return
            else:
                body = await response.read()
            elapsed = (time.perf_counter() - started) * 1000
            label = str(response.status)
            if response.status != 200:  # read whole above: only a 200 is streamed
                label += f" {_error_code(body)}"
            if response.status == 200 or (response.status == 503 and "retry-after" in response.headers):
                tally.answered[f"{kind} {label}"] += 1
            else:
                tally.lost[f"{kind} {label}"] += 1
                return
            if response.status == 503:
                tally.shed_ms.append(elapsed)
            elif kind == "short" and not stream:
                tally.short_ms.append(elapsed)
            elif kind == "long":
                tally.long_ms.append(elapsed)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        tally.lost[f"{kind} {type(exc).__name__}"] += 1


async def traffic(url: str, minutes: float, rate: float, kill_every: float, gateway: psutil.Process,
                  rss: list[tuple[float, int]], seed: int) -> tuple[Tally, list[int]]:
    rng = random.Random(seed)
    print(f"building long prompts {LONG_TOKENS} ...", flush=True)
    short = {s: json.dumps({"model": "echo", "messages": SHORT, "stream": s}).encode() for s in (False, True)}
    # The random-sentence prompt, as before issue #31 (the soak measures survival, not compression cost).
    prompts = {n: big_prompt(n, seed=i, kind="sentences") for i, n in enumerate(LONG_TOKENS)}
    long = {(n, s): json.dumps({"model": "big", "messages": prompts[n], "stream": s}).encode()
            for n in LONG_TOKENS for s in (False, True)}
    tally, killed = Tally(), []
    tasks: set[asyncio.Task[None]] = set()
    began = time.monotonic()
    end = began + minutes * 60
    next_kill = began + kill_every / 2
    connector = aiohttp.TCPConnector(limit=256)
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        sampler = asyncio.create_task(sample_rss(gateway, rss, began))
        tick = began
        while (now := time.monotonic()) < end:
            if now >= next_kill:
                killed += kill_one_worker(gateway, rng)
                next_kill += kill_every
            is_long, stream = rng.random() < 0.05, rng.random() < 0.10
            payload = long[(rng.choice(LONG_TOKENS), stream)] if is_long else short[stream]
            task = asyncio.create_task(one_request(
                session, url, payload, kind="long" if is_long else "short", stream=stream,
                hang_up=stream and rng.random() < 1 / 3, tally=tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            tick += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
        print(f"sending done after {minutes} min; waiting for {len(tasks)} in flight", flush=True)
        await asyncio.gather(*tasks)
        await asyncio.sleep(3)  # a last RSS sample with nothing in flight
        sampler.cancel()
    return tally, killed


def _error_code(body: bytes) -> str | None:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "not-openai-json"


async def stall_probe(port: int, stalled: int, body_limit: int, probes: int = 50) -> dict[str, Any]:
    """Uploads that stall must cost only their own connections: ``stalled`` clients declare
    ``body_limit``-byte bodies and send nothing, then ``probes`` short requests are timed; last,
    how the stalled ones end (408 after general_settings.body_timeout_s)."""

    async def headers_only(length: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode())
        await writer.drain()
        return reader, writer

    began = time.perf_counter()
    holders = [await headers_only(body_limit) for _ in range(stalled)]
    await asyncio.sleep(0.5)
    timings, statuses = [], collections.Counter()
    payload = json.dumps({"model": "echo", "messages": SHORT}).encode()
    async with aiohttp.ClientSession() as session:
        for _ in range(probes):
            started = time.perf_counter()
            async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=payload,
                                    headers={"content-type": "application/json"}) as answer:
                await answer.read()
                statuses[str(answer.status)] += 1
            timings.append((time.perf_counter() - started) * 1000)
    ends = collections.Counter()
    for reader, writer in holders:
        line = await reader.readline()
        ends[line.split()[1].decode() if line else "closed"] += 1
        writer.close()
    return {"short_statuses": dict(statuses), "short_latency_ms": summarize(timings),
            "stalled_ended_with": dict(ends), "stalled_ended_after_s": time.perf_counter() - began}


def kill_one_worker(gateway: psutil.Process, rng: random.Random) -> list[int]:
    workers = compression_workers(gateway)
    if not workers:
        print("  no compression worker to kill (all restarting)", flush=True)
        return []
    victim = rng.choice(workers)
    os.kill(victim.pid, signal.SIGKILL)
    print(f"  SIGKILL compression worker {victim.pid}", flush=True)
    return [victim.pid]


async def sample_rss(gateway: psutil.Process, rss: list[tuple[float, int]], began: float) -> None:
    while True:
        rss.append((time.monotonic() - began, gateway.memory_info().rss))
        await asyncio.sleep(1)


def rss_report(rss: list[tuple[float, int]], warm_up_s: float, load_s: float) -> dict[str, float]:
    """Medians over 10 s under load: right after warm-up and at the end; the trend in between
    (least squares); then idle, after the drain."""
    mib = 1024 * 1024

    def median_between(start: float, end: float) -> float:
        return statistics.median([r for t, r in rss if start <= t <= end] or [rss[-1][1]]) / mib

    times = [t for t, _ in rss if warm_up_s <= t <= load_s]
    sizes = [r / mib for t, r in rss if warm_up_s <= t <= load_s]
    slope = statistics.linear_regression(times, sizes).slope * 60 if len(times) > 2 else 0.0
    return {"peak_mib": max(r for _, r in rss) / mib,
            "after_warm_up_mib": median_between(warm_up_s - 10, warm_up_s),
            "slope_after_warm_up_mib_per_min": slope,
            "end_of_load_mib": median_between(load_s - 10, load_s),
            "idle_after_mib": rss[-1][1] / mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second offered (default 10)")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between worker kills")
    parser.add_argument("--workers", type=int, default=2, help="compression workers (default 2)")
    parser.add_argument("--warm-up", type=float, default=60.0, help="seconds before the RSS baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    warm_up = min(args.warm_up, args.minutes * 60 / 3)
    with tempfile.TemporaryDirectory() as tmp:
        upstream_proc, upstream = start_upstream()
        port = free_port()
        log = Path(tmp) / "gateway.log"
        gateway_proc = None
        try:
            with log.open("w") as sink:
                gateway_proc = start_gateway(write_config(Path(tmp), upstream, args.workers), port, 1,
                                             stderr=sink)
            rss: list[tuple[float, int]] = []
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            tally, killed = asyncio.run(traffic(url, args.minutes, args.rate, args.kill_every,
                                                psutil.Process(gateway_proc.pid), rss, args.seed))
            restarts = _metric(port, "mixpr_compression_worker_restarts_total")
            stall = asyncio.run(stall_probe(port, INFLIGHT_BODY_BYTES // BODY_BYTES, BODY_BYTES))
        finally:
            if gateway_proc is not None:
                gateway_proc.terminate()
                gateway_proc.wait(30)
            upstream_proc.kill()
        # Without the timestamp, so repeats count together (the gateway never logs prompt text).
        errors = collections.Counter(line.split(" ", 2)[-1] for line in log.read_text().splitlines()
                                     if " ERROR " in line)
    figures = {
        "minutes": args.minutes, "rate": args.rate, "sent": tally.sent,
        "answered": dict(sorted(tally.answered.items())), "lost": dict(tally.lost),
        "hung_up_mid_stream": tally.hung_up, "workers_killed": len(killed), "worker_restarts": restarts,
        "short_latency_ms": summarize(tally.short_ms) if tally.short_ms else {},
        "long_latency_ms": summarize(tally.long_ms) if tally.long_ms else {},
        "shed_latency_ms": summarize(tally.shed_ms) if tally.shed_ms else {},
        "gateway_rss": rss_report(rss, warm_up, args.minutes * 60) | {"warm_up_s": warm_up},
        "stalled_uploads_probe": stall,
        "gateway_error_log": dict(errors),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2))


def _metric(port: int, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


if __name__ == "__main__":
    main()
