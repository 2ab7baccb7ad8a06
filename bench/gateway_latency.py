"""Gateway latency (issue #3): what the gateway adds over calling LiteLLM directly.

Three processes on 127.0.0.1: a canned OpenAI-compatible upstream (tests/gateway/fake_upstream.py),
the gateway (``python -m gateway``), and this client. Measured:

1. Passthrough overhead at 1 and 32 concurrent clients: a short chat request sent with a plain aiohttp
   POST (what an OpenAI client does) (a) directly to the upstream (the baseline), (b) to the gateway
   (which relays it as bytes, ``gateway.upstream.chat_relay``), (b'') the same to an observe-mode model
   (issue 36), and a short conversation to both (whose would-have observe mode computes after each
   response), with their p50 ratio and added-p50 difference, (b') the same as a Responses API request
   to the gateway (translated to chat, through LiteLLM), (c) to a LiteLLM proxy in front of the same
   upstream (``litellm --config``, skipped with ``--no-proxy``), (c') to Portkey's open-source gateway
   in front of it (``bench.peers``, npm ``@portkey-ai/gateway``, skipped with ``--no-portkey`` or without
   node), and (d) with ``litellm.acompletion`` to the upstream (LiteLLM as a library). Rounds
   interleaved; p50/p95/p99 and requests/s for each, and what each adds over (a).
2. A ~1M-token chat request (book text, a needle, a question): end-to-end time through the gateway
   vs the same request sent directly (the upstream accepts any size), and the gateway's own compression
   time. The book text is the shared haystack's novels repeated to
   length (``bench.long_text``; CPython's language reference without ``../shared``); an extra row sends
   the old prompt of random sentences from a dozen (``tests/gateway/corpus.py``), whose vocabulary of a
   few hundred words makes compression far cheaper than real text. Each row gives its text's vocabulary.
3. Short-request p50/p99 through the gateway while 1M-token book-text requests are compressed back to back.
4. Recall through the gateway vs the library: ``bench.tasks`` samples (32k tokens) sent as one user message
   with the oracle route; the text that reaches the upstream must equal what ``mixpr.compress`` keeps
   (rebuilt the gateway's way), so the recall is the same. Needs ``../shared/data`` (see bench/README.md).

    .venv/bin/python -m bench.gateway_latency                    # full run, about a minute
    .venv/bin/python -m bench.gateway_latency --quick            # fewer requests, smaller big prompt
    .venv/bin/python -m bench.gateway_latency --json out/gateway_latency.json
    .venv/bin/python -m bench.gateway_latency --recall-only      # just part 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import aiohttp  # noqa: E402
import litellm  # noqa: E402

from bench import long_text, peers  # noqa: E402
from tests.gateway.corpus import NEEDLE, QUESTION  # noqa: E402

litellm.suppress_debug_info = True

SHORT = [{"role": "user", "content": "Say hello in one word."}]
# A short conversation: in observe mode its would-have is computed after each response (sampled).
CONVERSATION = [*SHORT, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Again, in French."}]
UPSTREAM_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from fake_upstream import FakeUpstream
up = FakeUpstream().start()
print(up.port, flush=True)
while True:
    time.sleep(3600)
"""


# -- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_upstream() -> tuple[subprocess.Popen, str]:
    script = UPSTREAM_SCRIPT.format(tests=str(ROOT / "tests" / "gateway"))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/v1"


def write_config(folder: Path, upstream: str, window: int, executor: str = "process",
                 raw_relay: bool = True, shadow_share: float | None = None) -> Path:
    def params(name: str) -> dict[str, str]:
        return {"model": f"openai/{name}", "api_base": upstream, "api_key": "k"}

    config = folder / "config.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "model_list": [
            {"model_name": "echo", "litellm_params": params("echo")},
            # The same upstream model in observe mode (issue 36): sent as it came, the would-have counted.
            {"model_name": "observe", "litellm_params": params("echo"), "mixpr": {"mode": "observe"}},
            {"model_name": "big", "litellm_params": params("big"),
             "model_info": {"max_input_tokens": window}},
        ],
        "mixpr_settings": {"budget_tokens": 4000, "router": "auto"},
        "general_settings": {"max_body_bytes": 64 * 1024 * 1024, "compression_executor": executor,
                             "raw_relay": raw_relay,
                             **({} if shadow_share is None else {"shadow_share": shadow_share})},
    }))
    return config


def start_gateway(config: Path, port: int, workers: int, **popen: Any) -> subprocess.Popen:
    argv = [sys.executable, "-m", "gateway", "--config", str(config), "--port", str(port),
            "--log-level", "warning", "--workers", str(workers)]
    proc = subprocess.Popen(argv, cwd=ROOT, **popen)
    deadline = time.monotonic() + 240  # imports and pool warm-up take minutes on a loaded machine
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/readiness", timeout=1) as answer:
                if answer.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("gateway did not start")


def stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``: on a loaded machine a graceful stop can take longer,
    and a bench that raised here left its upstream process running."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- load -----------------------------------------------------------------------------------------


async def run_load(call: Callable[[], Awaitable[None]], total: int, concurrency: int) -> dict[str, float]:
    """``total`` calls from ``concurrency`` workers; latency percentiles in ms and requests/s."""
    latencies: list[float] = []
    remaining = iter(range(total))

    async def worker() -> None:
        for _ in remaining:
            started = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    return summarize(latencies) | {"rps": total / elapsed}


def summarize(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    return {"n": len(ordered), "p50": pct(50), "p95": pct(95), "p99": pct(99),
            "mean": statistics.fmean(ordered)}


def post_call(session: aiohttp.ClientSession, url: str, payload: bytes,
              headers: dict[str, str] | None = None) -> Callable[[], Awaitable[bytes]]:
    """One POST of ``payload`` to ``url``; anything but a 200 stops the run."""
    sent = {"content-type": "application/json", **(headers or {})}

    async def call() -> bytes:
        async with session.post(url, data=payload, headers=sent) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"{url} answered {response.status}: {body[:300]!r}")
            return body

    return call


def direct_call(upstream: str, messages: list[dict]) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        return await litellm.acompletion(model="openai/echo", api_base=upstream, api_key="k",
                                         messages=messages, max_retries=0)

    return call


def gateway_call(session: aiohttp.ClientSession, url: str, model: str, messages: list[dict],
                 extra_headers: dict[str, str] | None = None) -> Callable[[], Awaitable[dict]]:
    payload = json.dumps({"model": model, "messages": messages}).encode()
    headers = {"content-type": "application/json", **(extra_headers or {})}

    async def call() -> dict:
        async with session.post(url + "/v1/chat/completions", data=payload, headers=headers) as response:
            body = await response.read()
            if response.status != 200:
                raise RuntimeError(f"gateway answered {response.status}: {body[:300]!r}")
            return {"headers": dict(response.headers), "body": body}

    return call


async def passthrough(upstream: str, gateway: str, session: aiohttp.ClientSession, total: int,
                      concurrency: int, proxy: str | None = None,
                      portkey: str | None = None) -> dict[str, Any]:
    payload = json.dumps({"model": "echo", "messages": SHORT}).encode()
    responses = json.dumps({"model": "echo", "input": SHORT[0]["content"]}).encode()
    sides = {"direct": post_call(session, upstream + "/chat/completions", payload),
             "gateway": gateway_call(session, gateway, "echo", SHORT),
             # Observe mode (issue 36): the short question's figures are known up front (unchanged) ...
             "gateway observe": gateway_call(session, gateway, "observe", SHORT),
             # ... a conversation's are computed after each response, in the background (sampled).
             "gateway conv": gateway_call(session, gateway, "echo", CONVERSATION),
             "gateway observe conv": gateway_call(session, gateway, "observe", CONVERSATION),
             # The Responses API on the same upstream: translated to chat, through LiteLLM (issue 30).
             "gateway responses": post_call(session, gateway + "/v1/responses", responses)}
    if proxy:
        sides["litellm proxy"] = post_call(session, proxy + "/v1/chat/completions", payload,
                                           {"authorization": f"Bearer {PROXY_KEY}"})
    if portkey:
        sides["portkey gateway"] = post_call(session, portkey + "/v1/chat/completions", payload,
                                             peers.portkey_headers(upstream))
    sides["litellm library"] = direct_call(upstream, SHORT)
    for call in sides.values():  # warm every path: connection pools, lazy imports
        await run_load(call, 100, concurrency)
    # Interleave rounds so that machine noise hits every side alike.
    rounds: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(4):
        for side, call in sides.items():
            rounds[side].append(await run_load(call, total // 4, concurrency))
    merged: dict[str, Any] = {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                              for side, rs in rounds.items()}
    merged["added"] = {side: {k: merged[side][k] - merged["direct"][k] for k in ("p50", "p95", "p99")}
                       for side in sides if side != "direct"}
    merged["observe"] = observe_vs_passthrough(merged)
    return merged


def observe_vs_passthrough(merged: dict[str, Any]) -> dict[str, float]:
    """Observe mode against compress mode's passthrough, same request: the p50s' ratio and the
    difference of what each adds over the direct call (issue 36: within 0.2 ms)."""
    out = {}
    for plain, observed in (("gateway", "gateway observe"), ("gateway conv", "gateway observe conv")):
        out[f"{observed} / {plain} p50"] = merged[observed]["p50"] / merged[plain]["p50"]
        added = merged["added"]
        out[f"{observed} - {plain} added p50 ms"] = added[observed]["p50"] - added[plain]["p50"]
    return out


def shadow_counts(gateway: str) -> tuple[float, float]:
    """The observe-mode model's would-have work so far: (computed, skipped), from ``/metrics``."""
    with urllib.request.urlopen(gateway + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts = {"computed": 0.0, "skipped": 0.0}
    for line in text.splitlines():
        if 'model="observe"' not in line or line.startswith("#"):
            continue
        if line.startswith("mixpr_shadow_requests_total") and 'result="computed"' in line:
            counts["computed"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("mixpr_shadow_skipped_total"):
            counts["skipped"] += float(line.rsplit(" ", 1)[1])
    return counts["computed"], counts["skipped"]


def sampled_share(before: tuple[float, float], after: tuple[float, float]) -> dict[str, float]:
    """Of the observe-mode conversations offered to the would-have work during a run, the share it
    computed (the rest skipped: the queue full, or its share of the time used, issue 48)."""
    computed, skipped = after[0] - before[0], after[1] - before[1]
    return {"observe conv sampled share": computed / (computed + skipped) if computed + skipped else 0.0}


PROXY_KEY = "sk-bench-5f0c2a9e7d3b41c8a6e2f9d07b1c3e5a"  # the LiteLLM proxy refuses to start without one


def start_proxy(folder: Path, upstream: str, port: int) -> subprocess.Popen:
    """A LiteLLM proxy (``litellm --config``, one worker) serving ``echo`` from ``upstream``."""
    config = folder / "proxy.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "echo",
                        "litellm_params": {"model": "openai/echo", "api_base": upstream, "api_key": "k"}}],
        "litellm_settings": {"num_retries": 0, "telemetry": False},
        "general_settings": {"master_key": PROXY_KEY},
    }))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
           "LITELLM_LOG": "ERROR"}
    env.pop("DATABASE_URL", None)
    argv = [str(Path(sys.executable).parent / "litellm"), "--config", str(config), "--host", "127.0.0.1",
            "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return peers.answering(proc, f"http://127.0.0.1:{port}/health/liveliness", "the LiteLLM proxy", 120)


def start_portkey(args: argparse.Namespace) -> tuple[subprocess.Popen | None, str | None]:
    """Portkey's gateway beside the gateway for part 1, or (None, None) with the reason printed."""
    if args.no_portkey or args.skip_passthrough or args.parts_only:
        return None, None
    port = free_port()
    try:
        return peers.start_portkey(port), f"http://127.0.0.1:{port}"
    except peers.PeerUnavailable as reason:
        print(f"no Portkey side: {reason}")
        return None, None


# -- the 1M-token request --------------------------------------------------------------------------


PROMPTS = ("books", "sentences")  # the first is the figure; the second the labelled extra row


def big_prompt(tokens: int, seed: int = 0, kind: str = "books") -> list[dict]:
    """About ``tokens`` tokens of ``kind`` text (``PROMPTS``), the needle at a paragraph break ~37% in
    (another depth for another ``seed``), and the question after a blank line."""
    text = long_text.book_text(tokens) if kind == "books" else long_text.sentence_text(tokens, seed)
    depth = 0.37 if seed == 0 else random.Random(seed).uniform(0.1, 0.9)
    cut = text.find("\n\n", int(len(text) * depth))
    cut = len(text) if cut < 0 else cut
    content = text[:cut] + "\n\n" + NEEDLE + text[cut:] + "\n\n" + QUESTION
    return [{"role": "system", "content": "Answer from the document."}, {"role": "user", "content": content}]


async def big_request(upstream: str, gateway: str, session: aiohttp.ClientSession, tokens: int,
                      repeats: int, kind: str = "books") -> dict[str, Any]:
    messages = big_prompt(tokens, kind=kind)
    via = gateway_call(session, gateway, "big", messages)
    direct = direct_call(upstream, messages)
    first = await via()  # includes the router call, whose answer is then cached
    direct_ms, gateway_ms, compress_ms = [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        await direct()
        direct_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        result = await via()
        gateway_ms.append((time.perf_counter() - started) * 1000)
        compress_ms.append(float(result["headers"]["x-mixpr-compress-ms"]))
    headers = first["headers"]
    return {
        "prompt": kind, "vocabulary": long_text.vocabulary(messages[-1]["content"]),
        "original_tokens": int(headers["x-mixpr-original-tokens"]),
        "compressed_tokens": int(headers["x-mixpr-compressed-tokens"]),
        "action": headers["x-mixpr-action"], "route": headers["x-mixpr-route"],
        "body_mb": len(json.dumps(messages)) / 1e6,
        "direct_ms": statistics.median(direct_ms), "gateway_ms": statistics.median(gateway_ms),
        "added_ms": statistics.median(gateway_ms) - statistics.median(direct_ms),
        "added_ms_max": max(g - d for g, d in zip(gateway_ms, direct_ms, strict=True)),
        "compress_ms": statistics.median(compress_ms),
    }


async def time_until(done: asyncio.Event, call: Callable[[], Awaitable[Any]], latencies: list[float],
                     pause_s: float = 0.0) -> None:
    """Call ``call`` again and again (``pause_s`` apart) until ``done``, appending each latency in ms."""
    while not done.is_set():
        started = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(pause_s)


async def short_under_big_load(gateway: str, session: aiohttp.ClientSession, tokens: int, big_count: int,
                               concurrency: int) -> dict[str, Any]:
    """Short requests' latency while ``big_count`` big requests are compressed one after another."""
    short = gateway_call(session, gateway, "echo", SHORT)
    messages = big_prompt(tokens, seed=1)
    big = gateway_call(session, gateway, "big", messages)
    await big()  # the router answer for this prompt is now cached, as in steady state
    latencies: list[float] = []
    done = asyncio.Event()

    async def bigs() -> float:
        started = time.perf_counter()
        for _ in range(big_count):
            await big()
        done.set()
        return time.perf_counter() - started

    workers = [asyncio.create_task(time_until(done, short, latencies)) for _ in range(concurrency)]
    busy_s = await bigs()
    await asyncio.gather(*workers)
    return summarize(latencies) | {"busy_s": busy_s, "big_requests": big_count,
                                   "vocabulary": long_text.vocabulary(messages[-1]["content"])}


async def paced(done: asyncio.Event, call: Callable[[], Awaitable[Any]], latencies: list[float],
                every_s: float) -> None:
    """Start ``call`` every ``every_s`` seconds, each on its own (open loop: a stalled gateway makes
    them pile up, as independent clients would), until ``done``; their latencies in ms."""
    async def one() -> None:
        started = time.perf_counter()
        await call()
        latencies.append((time.perf_counter() - started) * 1000)

    tasks = []
    while not done.is_set():
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(every_s)
    await asyncio.gather(*tasks)


async def short_during_parts(gateway: str, session: aiohttp.ClientSession, parts: int,
                             model: str = "big") -> dict[str, Any]:
    """Short requests (one started every 100 ms) while one message of ``parts`` one-letter text parts
    is answered by ``model`` ("big" has room for it, so it is forwarded: LiteLLM builds the upstream
    request part by part): its status and time, and the short requests' latency meanwhile."""
    short = gateway_call(session, gateway, "echo", SHORT)
    await run_load(short, 50, 1)  # warm
    content = [{"type": "text", "text": "w"} for _ in range(parts)]
    payload = json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()
    latencies: list[float] = []
    done = asyncio.Event()
    task = asyncio.create_task(paced(done, short, latencies, every_s=0.1))
    started = time.perf_counter()
    async with session.post(gateway + "/v1/chat/completions", data=payload,
                            headers={"content-type": "application/json"}) as response:
        body = await response.read()
    elapsed = time.perf_counter() - started
    done.set()
    await task
    error = body[:200].decode(errors="replace") if response.status != 200 else None
    return {"parts": parts, "model": model, "body_mb": len(payload) / 1e6, "status": response.status,
            "seconds": elapsed, "error": error,
            "short_meanwhile_ms": summarize(latencies) | {"max": max(latencies)}}


# -- recall through the gateway ---------------------------------------------------------------------

RECALL_TASKS = ("niah_single_1", "niah_multikey_1", "vt", "cwe", "babilong_qa2", "hashhop_3")
RECALL_WINDOW = 16_384  # below the samples' 32k tokens, so they are compressed; budget stays 4000


async def recall_through_gateway(session: aiohttp.ClientSession, folder: Path, tasks: tuple[str, ...],
                                 length: int, seeds: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "tests" / "gateway"))
    from fake_upstream import FakeUpstream  # records what the gateway forwards, in this process

    from bench import metrics
    from bench.quality import ORACLE_ROUTE
    from bench.tasks import generate
    from gateway.compress import conversation
    from mixpr import compress

    upstream = FakeUpstream().start()
    port = free_port()
    config = write_config(folder, upstream.base_url, window=RECALL_WINDOW)
    gateway_proc = start_gateway(config, port, workers=1)
    rows = []
    try:
        for task in tasks:
            for seed in range(seeds):
                sample = generate(task, length, seed)
                route = ORACLE_ROUTE[sample.family]
                messages = [{"role": "user", "content": sample.text}]
                upstream.clear()
                url = f"http://127.0.0.1:{port}"
                call = gateway_call(session, url, "big", messages, {"x-mixpr-route": route})
                await call()
                forwarded = upstream.received("big")[-1].json["messages"][0]["content"]
                library = compress(sample.text, budget_tokens=4000, route=route, model="openai/big")
                expected = conversation.rebuild(conversation.split(messages), library.spans)[0]["content"]
                rows.append({
                    "task": task, "seed": seed, "route": route, "identical": forwarded == expected,
                    "gateway": metrics.score(sample, forwarded, library.spans) if forwarded == expected else
                    metrics.needle_recall(sample, forwarded),
                    "library": metrics.score(sample, library.text, library.spans),
                })
    finally:
        stop(gateway_proc, 10)
        upstream.stop()
    return rows


def print_recall(rows: list[dict[str, Any]]) -> None:
    print(f"\nrecall through the gateway vs the library ({len(rows)} samples, oracle route, budget 4000)")
    print(f"  {'task':18} {'gateway':>8} {'library':>8}  same text")
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        gw, lib = (statistics.fmean(r[k] for r in mine) for k in ("gateway", "library"))
        same = sum(r["identical"] for r in mine)
        print(f"  {task:18} {gw:8.3f} {lib:8.3f}  {same}/{len(mine)}")


# -- report ---------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine()}
    one, five, fifteen = os.getloadavg()
    print(f"load average (1, 5, 15 min): {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs")
    if not args.recall_only:
        results.update(await latency(args))
    if not args.skip_recall:
        with tempfile.TemporaryDirectory() as folder:
            async with aiohttp.ClientSession() as session:
                rows = await recall_through_gateway(session, Path(folder), RECALL_TASKS, args.recall_length,
                                                    args.recall_seeds)
        results["recall"] = rows
        print_recall(rows)
    return results


async def latency(args: argparse.Namespace) -> dict[str, Any]:
    upstream_proc, upstream = start_upstream()
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        config = write_config(Path(folder), upstream, window=128_000, executor=args.executor,
                              raw_relay=not args.no_relay, shadow_share=args.shadow_share)
        try:
            gateway_proc = start_gateway(config, port, args.gateway_workers)
        except BaseException:  # a gateway that never came up must not leave the upstream running
            upstream_proc.kill()
            raise
        gateway = f"http://127.0.0.1:{port}"
        proxy_proc, proxy = None, None
        if not args.no_proxy and not args.skip_passthrough and not args.parts_only:
            proxy_port = free_port()
            proxy_proc = start_proxy(Path(folder), upstream, proxy_port)
            proxy = f"http://127.0.0.1:{proxy_port}"
        portkey_proc, portkey = start_portkey(args)
        connector = aiohttp.TCPConnector(limit=64)
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                results: dict[str, Any] = {"gateway_workers": args.gateway_workers, "executor": args.executor,
                                           "raw_relay": not args.no_relay, "load_average": os.getloadavg(),
                                           "uvloop": _has("uvloop"), "httptools": _has("httptools")}
                if args.parts_only:  # issue #16: one request of many tiny parts
                    results["many_parts"] = await short_during_parts(gateway, session, args.parts_only,
                                                                     args.parts_model)
                    print(json.dumps(results["many_parts"], indent=2))
                    return results
                for concurrency in () if args.skip_passthrough else (1, 32):
                    total = args.requests if concurrency == 1 else args.requests * 3
                    before = shadow_counts(gateway)
                    results[f"passthrough_c{concurrency}"] = await passthrough(upstream, gateway, session,
                                                                               total, concurrency, proxy,
                                                                               portkey)
                    results[f"passthrough_c{concurrency}"]["observe"].update(
                        sampled_share(before, shadow_counts(gateway)))
                    print_passthrough(concurrency, results[f"passthrough_c{concurrency}"])
                if args.passthrough_only:
                    return results
                for kind in PROMPTS:  # "big": book text, the figure; "big_sentences": the extra row
                    key = "big" if kind == "books" else f"big_{kind}"
                    results[key] = await big_request(upstream, gateway, session, args.big_tokens,
                                                     args.repeats, kind)
                    print_big(results[key])
                results["short_during_big"] = await short_under_big_load(gateway, session, args.big_tokens,
                                                                         args.repeats, args.short_clients)
                results["short_idle"] = await run_load(gateway_call(session, gateway, "echo", SHORT),
                                                       400, args.short_clients)
                print_short(results["short_during_big"], results["short_idle"], args.short_clients)
        finally:
            for peer in (proxy_proc, portkey_proc):
                if peer is not None:
                    stop(peer, 20)
            stop(gateway_proc, 10)
            upstream_proc.kill()
            upstream_proc.wait(10)
    return results


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "litellm": getattr(litellm, "__version__", None) or _version("litellm")}


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def print_passthrough(concurrency: int, r: dict[str, Any]) -> None:
    print(f"\npassthrough, {concurrency} concurrent client(s), {int(r['direct']['n']) * 4} requests per side")
    print(f"  {'':20} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'req/s':>8}   added: {'p50':>7} {'p95':>7} "
          f"{'p99':>7}")
    for side, s in r.items():
        if side in ("added", "observe"):
            continue
        a = r["added"].get(side)
        added = f"{a['p50']:7.2f} {a['p95']:7.2f} {a['p99']:7.2f}" if a else ""
        print(f"  {side:20} {s['p50']:8.2f} {s['p95']:8.2f} {s['p99']:8.2f} {s['rps']:8.0f}          {added}")
    for name, value in r["observe"].items():
        print(f"  {name}: {value:.3f}")


def print_big(r: dict[str, Any]) -> None:
    label = "book text" if r["prompt"] == "books" else "random sentences (extra row, easy text)"
    print(f"\nbig request, {label}: {r['original_tokens']:,} tokens ({r['body_mb']:.1f} MB), vocabulary "
          f"{r['vocabulary']:,} words -> {r['compressed_tokens']:,} tokens, {r['action']}, "
          f"route {r['route']}")
    print(f"  direct (whole prompt to upstream) {r['direct_ms']:.0f} ms; through gateway "
          f"{r['gateway_ms']:.0f} ms; added {r['added_ms']:.0f} ms (worst {r['added_ms_max']:.0f} ms); "
          f"compression {r['compress_ms']:.0f} ms")


def print_short(busy: dict[str, Any], idle: dict[str, Any], clients: int) -> None:
    print(f"\nshort requests through the gateway, {clients} clients")
    print(f"  idle:                    p50 {idle['p50']:.1f} ms  p99 {idle['p99']:.1f} ms  (n={idle['n']})")
    print(f"  during {busy['big_requests']} big book-text requests ({busy['busy_s']:.1f} s, vocabulary "
          f"{busy['vocabulary']:,}): p50 {busy['p50']:.1f} ms  "
          f"p99 {busy['p99']:.1f} ms  (n={busy['n']})")


def main(argv: list[str] | None = None) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--requests", type=int, default=1000, help="requests per side at 1 client (x3 at 32)")
    parser.add_argument("--big-tokens", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="big requests timed (and under load)")
    parser.add_argument("--short-clients", type=int, default=2, help="clients sending short requests")
    parser.add_argument("--gateway-workers", type=int, default=1, help="the gateway's --workers")
    parser.add_argument("--executor", choices=["process", "thread"], default="process",
                        help="general_settings.compression_executor of the gateway")
    parser.add_argument("--skip-passthrough", action="store_true", help="only the big-request parts")
    parser.add_argument("--no-proxy", action="store_true", help="no LiteLLM proxy beside the gateway")
    parser.add_argument("--no-portkey", action="store_true", help="no Portkey gateway beside the gateway")
    parser.add_argument("--no-relay", action="store_true",
                        help="the gateway with raw_relay: false (every request through LiteLLM, as before)")
    parser.add_argument("--passthrough-only", action="store_true", help="only part 1")
    parser.add_argument("--shadow-share", type=float, default=None,
                        help="the gateway's general_settings.shadow_share (default: the gateway's own)")
    parser.add_argument("--quick", action="store_true", help="200 requests, a 200k-token big prompt")
    parser.add_argument("--recall-only", action="store_true", help="only the recall comparison")
    parser.add_argument("--skip-recall", action="store_true", help="skip part 4 (needs ../shared/data)")
    parser.add_argument("--recall-length", type=int, default=32 * 1024)
    parser.add_argument("--recall-seeds", type=int, default=2)
    parser.add_argument("--parts-only", type=int, default=0, metavar="N",
                        help="only: short requests while one message of N tiny text parts is answered")
    parser.add_argument("--parts-model", choices=["big", "echo"], default="big",
                        help="the model of --parts-only: big (128k window, forwarded) or echo (8k, refused)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.big_tokens, args.repeats = 200, 200_000, 2
    results = asyncio.run(main_async(args))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
