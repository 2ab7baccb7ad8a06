"""Saturation throughput of a passthrough (issue 23, item 5): this gateway against the LiteLLM proxy.

Processes on 127.0.0.1: the tests' recording upstream (``tests/gateway/fake_upstream.py``), the
gateway (``python -m gateway``, one worker: one event loop, so at most one core) with the raw relay
and again with ``raw_relay: false`` (every request through LiteLLM, as before issue 23), and the
LiteLLM proxy (``litellm --config``, one worker). The load generator is ``wrk`` (C, one thread per
``--threads``; ``apt-get install -y wrk``), so the client is not what saturates. Each target is
driven for ``--seconds`` at each concurrency, rounds interleaved so that machine noise hits every
side alike; the upstream alone is measured too (the ceiling this rig can show). Printed per
target: requests/s, p50 and p99 latency (wrk's), non-2xx answers, and the CPU the server process
(and its children) used, in cores: requests/s divided by that is how far one core goes.

    .venv/bin/python -m bench.throughput --quick          # 3 s per run, c=32 only
    .venv/bin/python -m bench.throughput                  # 10 s per run, c=1, 32, 128, 3 rounds
    .venv/bin/python -m bench.throughput --json out/throughput.json

Timing figures need a quiet machine: ``uptime``'s load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gateway_latency import PROXY_KEY as MASTER_KEY  # both servers check the same key
from bench.gateway_latency import free_port, start_gateway, start_proxy, start_upstream

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "echo", "messages": [{"role": "user", "content": "Say hello in one word."}]}
TICKS = os.sysconf("SC_CLK_TCK")
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def write_gateway_config(folder: Path, upstream: str, *, raw_relay: bool) -> Path:
    path = folder / f"gateway-{'relay' if raw_relay else 'litellm'}.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "model_list": [{"model_name": "echo",
                        "litellm_params": {"model": "openai/echo", "api_base": upstream, "api_key": "k"}}],
        "general_settings": {"compression_workers": 1, "raw_relay": raw_relay, "master_key": MASTER_KEY},
    }))
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        child = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(child)
        times[child] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo += children.get(current, [])
    return total


def wrk(url: str, script: Path, *, connections: int, seconds: float, threads: int) -> dict[str, float]:
    argv = ["wrk", f"-t{min(threads, connections)}", f"-c{connections}", f"-d{max(1, round(seconds))}s",
            "--latency", "-s", str(script), url]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    if set(latency) != {"50", "99"}:
        raise RuntimeError(f"no latency distribution in wrk's output:\n{out}")
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)$", out, re.M)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": _ms(latency["50"]), "p99": _ms(latency["99"]),
            "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
            # connect, read, write errors and timeouts (wrk gives up on a request after 2 s)
            "errors": sum(int(n) for n in re.findall(r"\d+", errors.group(1))) if errors else 0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * _UNITS[unit]


def measure(targets: dict[str, tuple[str, subprocess.Popen | None]], script: Path, *, concurrency: int,
            seconds: float, rounds: int, threads: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, (url, proc) in targets.items():
            before = cpu_seconds(proc.pid) if proc else 0.0
            started = time.monotonic()
            result = wrk(url, script, connections=concurrency, seconds=seconds, threads=threads)
            elapsed = time.monotonic() - started
            result["cores"] = (cpu_seconds(proc.pid) - before) / elapsed if proc else float("nan")
            runs[name].append(result)
    keys = ("rps", "p50", "p99", "cores", "non_2xx", "errors")
    return {name: {key: statistics.median(r[key] for r in rs) for key in keys} for name, rs in runs.items()}


def print_table(concurrency: int, results: dict[str, dict[str, float]]) -> None:
    print(f"\npassthrough at saturation, {concurrency} connections (wrk), median of the rounds")
    print(f"  {'target':22} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'cores':>6} {'req/s/core':>10} "
          f"{'non-2xx':>8} {'errors':>7}")
    for name, r in results.items():
        per_core = r["rps"] / r["cores"] if r["cores"] and r["cores"] == r["cores"] else float("nan")
        print(f"  {name:22} {r['rps']:8.0f} {r['p50']:8.2f} {r['p99']:8.2f} {r['cores']:6.2f} "
              f"{per_core:10.0f} {int(r['non_2xx']):8d} {int(r['errors']):7d}")
    ours, proxy = results.get("gateway (relay)"), results.get("litellm proxy")
    if ours and proxy and proxy["rps"]:
        print(f"  gateway (relay) / litellm proxy: {ours['rps'] / proxy['rps']:.1f}x requests/s")


def main(argv: list[str] | None = None) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each wrk run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 128])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per concurrency")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (the machine's other core)")
    parser.add_argument("--no-proxy", action="store_true", help="skip the LiteLLM proxy")
    parser.add_argument("--quick", action="store_true", help="3 s runs, c=32, one round")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.concurrency, args.rounds = 3.0, [32], 1
    if shutil.which("wrk") is None:
        sys.exit("bench.throughput needs wrk (apt-get install -y wrk)")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    procs: list[subprocess.Popen] = []
    results: dict[str, Any] = {"load_average_before": load_average(), "cpus": os.cpu_count()}
    print(f"load average before: {results['load_average_before']} ({os.cpu_count()} CPUs)")
    try:
        upstream_proc, upstream = start_upstream()
        procs.append(upstream_proc)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            script = folder / "post.lua"
            script.write_text('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                              f'wrk.headers["Authorization"] = "Bearer {MASTER_KEY}"\n'
                              f"wrk.body = {json.dumps(json.dumps(BODY))}\n")
            targets: dict[str, tuple[str, subprocess.Popen | None]] = {
                "upstream alone": (upstream + "/chat/completions", upstream_proc)}
            for name, relay in (("gateway (relay)", True), ("gateway (litellm)", False)):
                port = free_port()
                proc = start_gateway(write_gateway_config(folder, upstream, raw_relay=relay), port, 1,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(proc)
                targets[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", proc)
            if not args.no_proxy:
                port = free_port()
                proc = start_proxy(folder, upstream, port)
                procs.append(proc)
                targets["litellm proxy"] = (f"http://127.0.0.1:{port}/v1/chat/completions", proc)
            for _, (url, _proc) in targets.items():  # warm: pools, lazy imports
                wrk(url, script, connections=4, seconds=1, threads=1)
            for concurrency in args.concurrency:
                table = measure(targets, script, concurrency=concurrency, seconds=args.seconds,
                                rounds=args.rounds, threads=args.threads)
                results[f"c{concurrency}"] = table
                print_table(concurrency, table)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    results["load_average_after"] = load_average()
    print(f"\nload average after: {results['load_average_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
