"""Gateway replicas behind a real load balancer, with and without the shared form cache (issue 29).

    .venv/bin/python -m bench.replicas                 # the dev split: 1 replica, R without, R with Redis
    .venv/bin/python -m bench.replicas --quick         # its 2 shortest runs per framework (minutes)
    .venv/bin/python -m bench.replicas --soak --quick  # R replicas + Redis, one SIGKILLed, restarted

Needs HAProxy and redis-server (Debian: ``apt-get install -y haproxy redis-server``); without them it says
so and exits. Every setting starts fresh processes: R gateways (``python -m gateway``, compression in
worker processes), HAProxy in front (round robin, no stickiness: each request of a conversation may land
on any replica), the tests' recording upstream (``tests/gateway/fake_upstream.py``, answers at once) and,
for "with Redis", a redis-server that every replica's ``general_settings.form_cache_url`` points at.

Traffic: ``bench.agents``'s replay of ``../shared/data/real/agent_traj.dev.jsonl``: for every step ``k`` of a
run the client sends ``messages[:k]`` (with the run's tools), the run's own next message follows whatever
came back. ``--concurrency`` runs replay at once (1: one request at a time, the cleanest latency). Each
request carries a ``user`` tag, so what the upstream received is matched to it.

Figures per setting: requests and errors (answers other than 200 after the client's retries), client
time p50/p95 (the upstream answers at once, so this is the gateway's and HAProxy's time),
``x-mixpr-compress-ms`` p95, forms computed (``x-mixpr-new-forms``, summed), CPU seconds of the
gateway processes and their compression workers (user + system, from ready to done, psutil), and the
requests whose upstream bytes (SHA-256 of the body) differ from one replica's. Targets: identical bytes
everywhere; with Redis, p95 and CPU within 1.3x of one replica's.

``--soak``: ``--clients`` clients replay runs over R replicas with Redis for ``--seconds``; a third of the
way in, one replica is SIGKILLed and restarted on its port. HAProxy retries a refused connection on
another replica (``retries`` + ``option redispatch``); a request in flight on the killed replica gets a
502 and the client retries it (as the OpenAI and Anthropic SDKs do, up to ``RETRIES`` times). Lost: a
request that never got a 200.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "gateway"))  # the tests' processes, Redis and recording upstream

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from fake_upstream import FakeUpstream  # noqa: E402
from processes import GatewayProcess  # noqa: E402
from redis_server import RedisServer, available, free_port  # noqa: E402

from bench import agents  # noqa: E402

RETRIES = 4  # client retries of a 502/503/504 or a dropped connection (the SDKs' default is 2)
RETRY_PAUSE_S = 0.5
RETRYABLE = frozenset({502, 503, 504})
TARGET_RATIO = 1.3
WORKERS = 2  # compression workers per replica (the default)
AFTER_RESTART_S = 15.0  # --soak: traffic the restarted replica takes part in
QUICK_PER_FRAMEWORK = 2  # --quick: the two shortest runs of each framework


# -- pure parts ---------------------------------------------------------------------------------


def haproxy_config(port: int, servers: list[int], *, check_ms: int = 2000) -> str:
    """HAProxy in front of ``servers`` (ports on 127.0.0.1): round robin, no stickiness, health checks
    on ``/health/readiness`` every ``check_ms`` (HAProxy's default: each check is gateway CPU too), a
    refused connection retried on another server."""
    lines = [
        "global", "    maxconn 256", "defaults", "    mode http",
        "    timeout connect 1s", "    timeout client 300s", "    timeout server 300s",
        "    retries 3", "    option redispatch 1",
        "frontend gateway", f"    bind 127.0.0.1:{port}", "    default_backend replicas",
        "backend replicas", "    balance roundrobin",
        "    option httpchk GET /health/readiness", "    http-check expect status 200",
        f"    default-server inter {check_ms}ms fall 2 rise 1",
    ]
    lines += [f"    server g{i} 127.0.0.1:{p} check" for i, p in enumerate(servers)]
    return "\n".join(lines) + "\n"


def tag(run: int, step: int) -> str:
    return f"bench-{run}-{step}"


def body(messages: list[dict[str, Any]], tools: list[dict[str, Any]], label: str) -> dict[str, Any]:
    out: dict[str, Any] = {"model": agents.MODEL, "messages": messages, "user": label}
    if tools:
        out["tools"] = tools
    return out


@dataclass
class Result:
    """One client request, after its retries."""

    tag: str
    status: int
    attempts: int
    client_ms: float
    compress_ms: float
    new_forms: int


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summary(results: list[Result], cpu_s: float, digests: dict[str, str],
            reference: dict[str, str] | None) -> dict[str, Any]:
    """One setting's row: counts, times, forms, CPU and the bytes compared with ``reference``."""
    ok = [r for r in results if r.status == 200]
    differ = None
    if reference is not None:
        differ = sum(1 for name, digest in digests.items() if reference.get(name) != digest)
        differ += sum(1 for name in reference if name not in digests)
    return {"requests": len(results), "errors": len(results) - len(ok),
            "retried": sum(1 for r in results if r.attempts > 1),
            "p50_ms": percentile([r.client_ms for r in ok], 50),
            "p95_ms": percentile([r.client_ms for r in ok], 95),
            "max_ms": max((r.client_ms for r in ok), default=float("nan")),
            "compress_p95_ms": percentile([r.compress_ms for r in ok], 95),
            "new_forms": sum(r.new_forms for r in ok), "cpu_s": cpu_s, "bytes_differ": differ}


def table(rows: dict[str, dict[str, Any]], base: str) -> str:
    """The rows as a text table, with each setting's p95 and CPU as a ratio of ``base``'s."""
    head = (f"{'setting':<28}{'requests':>9}{'errors':>7}{'p50 ms':>9}{'p95 ms':>9}{'x p95':>7}"
            f"{'compress p95':>13}{'new forms':>10}{'CPU s':>8}{'x CPU':>7}{'bytes differ':>13}")
    out = [head, "-" * len(head)]
    for name, row in rows.items():
        p95 = row["p95_ms"] / rows[base]["p95_ms"] if base in rows else float("nan")
        cpu = row["cpu_s"] / rows[base]["cpu_s"] if base in rows else float("nan")
        differ = "-" if row["bytes_differ"] is None else str(row["bytes_differ"])
        out.append(f"{name:<28}{row['requests']:>9}{row['errors']:>7}{row['p50_ms']:>9.0f}{row['p95_ms']:>9.0f}"
                   f"{p95:>7.2f}{row['compress_p95_ms']:>13.0f}{row['new_forms']:>10}{row['cpu_s']:>8.1f}"
                   f"{cpu:>7.2f}{differ:>13}")
    return "\n".join(out)


def verdict(rows: dict[str, dict[str, Any]], base: str, shared: str) -> list[str]:
    """The issue's targets, each as a line saying whether it was met."""
    lines = [f"identical bytes on every request ({name}): {'yes' if row['bytes_differ'] == 0 else 'NO'}"
             for name, row in rows.items() if row["bytes_differ"] is not None]
    if base in rows and shared in rows:
        for key, label in (("p95_ms", "p95 client time"), ("cpu_s", "CPU seconds")):
            ratio = rows[shared][key] / rows[base][key]
            met = "met" if ratio <= TARGET_RATIO else "NOT met"
            lines.append(f"{label} with Redis / one replica: {ratio:.2f} (target <= {TARGET_RATIO}: {met})")
    return lines


# -- processes ----------------------------------------------------------------------------------


def gateway_config(upstream: str, redis_url: str | None) -> dict[str, Any]:
    config = agents.gateway_config(upstream, agents.GATEWAY["defaults"])
    general = config["general_settings"]
    # One secret for every setting: it keys the form cache's signatures and the prompt_cache_key, which
    # is in the bytes compared (an install's own secret in one setting and this in another would differ).
    general.update({"compression_executor": "process", "compression_workers": WORKERS,
                    "deployment_secret": "bench-replicas-" + "s" * 32})
    if redis_url:
        general["form_cache_url"] = redis_url
    return config


class Fleet:
    """R gateway processes on one config; their CPU time counted from when they are all ready."""

    def __init__(self, config: Path, replicas: int, logs: Path) -> None:
        self.config = config
        self.logs = logs
        self.gateways = [GatewayProcess(config, logs / f"gateway-{i}.log") for i in range(replicas)]
        for gateway in self.gateways:
            gateway.wait()
            warm_up(gateway.url)
        self.spent = 0.0  # CPU of processes since replaced
        self.started = self._cpu()

    @property
    def ports(self) -> list[int]:
        return [g.port for g in self.gateways]

    def cpu_seconds(self) -> float:
        return self.spent + self._cpu() - self.started

    def kill(self, index: int) -> None:
        self.spent += _tree_cpu(self.gateways[index].process.pid)
        self.gateways[index].kill()

    def restart(self, index: int) -> None:
        old = self.gateways[index]
        self.gateways[index] = GatewayProcess(self.config, old.log, port=old.port)
        self.gateways[index].wait()

    def stop(self) -> None:
        for gateway in self.gateways:
            gateway.stop()

    def _cpu(self) -> float:
        return sum(_tree_cpu(g.process.pid) for g in self.gateways if g.process.poll() is None)


def warm_up(url: str) -> None:
    """A short compressed conversation straight to one replica, so that what a process does once
    (LiteLLM's first call, tokenizers, the workers' imports) is not counted as per-request work."""
    view = (agents.ROOT / "gateway" / "config.py").read_text(encoding="utf-8")
    call = {"id": "warm", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat"}'}}
    messages = [{"role": "user", "content": "Warm up: read the config."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "warm", "content": view}]
    with httpx.Client(base_url=url, timeout=600) as http:
        for _ in range(2):
            http.post("/v1/chat/completions", json=body(messages, [], "warm-up")).raise_for_status()


def _tree_cpu(pid: int) -> float:
    """User + system seconds of a process and its children (the compression workers)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
        return total
    except psutil.NoSuchProcess:
        return 0.0


class Balancer:
    """HAProxy in the foreground (``-db``) on a free port."""

    def __init__(self, servers: list[int], workdir: Path) -> None:
        self.port = free_port()
        config = workdir / "haproxy.cfg"
        config.write_text(haproxy_config(self.port, servers))
        self.process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                                        stderr=(workdir / "haproxy.log").open("ab"))
        self._wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)

    def _wait(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(self.url + "/health/readiness", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("HAProxy did not start (see haproxy.log)")


@contextmanager
def setting(upstream: FakeUpstream, replicas: int, redis: bool, workdir: Path) -> Iterator[tuple[str, Fleet]]:
    """Fresh processes for one setting: Redis (if asked), the replicas, HAProxy; the URL to send to."""
    with ExitStack() as stack:
        url = None
        if redis:
            server = RedisServer(workdir / "redis", maxmemory="512mb").start()
            stack.callback(server.stop)
            url = server.url
        config = workdir / "config.yaml"
        config.write_text(yaml.safe_dump(gateway_config(upstream.base_url, url)))
        fleet = Fleet(config, replicas, workdir)
        stack.callback(fleet.stop)
        balancer = Balancer(fleet.ports, workdir)
        stack.callback(balancer.stop)
        yield balancer.url, fleet


# -- the client -----------------------------------------------------------------------------------


def send(http: httpx.Client, payload: dict[str, Any]) -> Result:
    """One request through the balancer, retried as an SDK would on 502/503/504 or a dropped connection."""
    started = time.perf_counter()
    status, response, attempt = 0, None, 0
    while attempt <= RETRIES:
        attempt += 1
        try:
            response = http.post("/v1/chat/completions", json=payload)
            status = response.status_code
        except httpx.TransportError:
            status, response = 0, None
        if status not in RETRYABLE and status != 0:
            break
        time.sleep(RETRY_PAUSE_S)
    headers = response.headers if response is not None else {}
    return Result(payload["user"], status, attempt, (time.perf_counter() - started) * 1000,
                  float(headers.get("x-mixpr-compress-ms", 0)), int(headers.get("x-mixpr-new-forms", 0)))


def replay(url: str, runs: list[agents.Trajectory], concurrency: int,
           stop: Callable[[], bool] = lambda: False, loops: int = 1) -> list[Result]:
    """Every step of every run (``loops`` times, tagged apart), ``concurrency`` runs at once; a run
    stops early once ``stop()`` says so."""
    jobs = [(n * len(runs) + i, run) for n in range(loops) for i, run in enumerate(runs)]
    results: list[Result] = []
    lock = threading.Lock()

    def one(job: tuple[int, agents.Trajectory]) -> None:
        number, run = job
        if stop():  # before the client: making one costs a TLS context, and --soak queues many runs
            return
        with httpx.Client(base_url=url, timeout=600) as http:
            for k in run.steps:
                if stop():
                    return
                result = send(http, body(run.messages[:k], run.tools, tag(number, k)))
                with lock:
                    results.append(result)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, jobs))
    return results


def digests(upstream: FakeUpstream) -> dict[str, str]:
    """SHA-256 of the last body the upstream received for each tag (a retried request: its answer)."""
    out = {}
    for recorded in upstream.received():
        if recorded.path.endswith("/chat/completions") and not recorded.is_router_call:
            out[recorded.json.get("user", "")] = hashlib.sha256(recorded.raw_body).hexdigest()
    upstream.clear()
    return out


# -- the two benches ----------------------------------------------------------------------------


def standard_settings(replicas: int) -> dict[str, tuple[int, bool]]:
    """The compared settings: name -> (replicas, with Redis); the first is the reference."""
    return {"1 replica": (1, False), f"{replicas} replicas, no Redis": (replicas, False),
            f"{replicas} replicas, Redis": (replicas, True)}


def compare(runs: list[agents.Trajectory], settings: dict[str, tuple[int, bool]],
            concurrency: int) -> dict[str, dict[str, Any]]:
    """Each setting on fresh processes, in order; bytes compared with the first setting's."""
    rows: dict[str, dict[str, Any]] = {}
    reference = None
    upstream = FakeUpstream().start()
    try:
        for name, (count, redis) in settings.items():
            with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp, \
                    setting(upstream, count, redis, Path(tmp)) as (url, fleet):
                upstream.clear()
                results = replay(url, runs, concurrency)
                cpu = fleet.cpu_seconds()
            seen = digests(upstream)
            rows[name] = summary(results, cpu, seen, reference)
            reference = reference or seen
            print(f"  {name}: {len(results)} requests", file=sys.stderr, flush=True)
    finally:
        upstream.stop()
    return rows


def soak(runs: list[agents.Trajectory], replicas: int, clients: int, seconds: float) -> dict[str, Any]:
    """Multi-turn traffic for ``seconds``; replica 1 SIGKILLed a third of the way in and restarted.
    The traffic goes on until the restarted replica has been serving for ``AFTER_RESTART_S`` too (a
    start-up on a busy machine can outlast ``seconds``)."""
    upstream = FakeUpstream().start()
    events: list[str] = []
    restarted_at: list[float] = []  # the killer thread notes when the replica is back
    try:
        with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, \
                setting(upstream, replicas, True, Path(tmp)) as (url, fleet):
            deadline = time.monotonic() + seconds
            killer = threading.Thread(target=_kill_and_restart,
                                      args=(fleet, seconds / 3, events, restarted_at), daemon=True)
            killer.start()
            started = time.monotonic()

            def stop() -> bool:
                now = time.monotonic()
                return now > deadline and bool(restarted_at) and now > restarted_at[0] + AFTER_RESTART_S

            results = replay(url, runs, clients, stop=stop, loops=100)
            elapsed = time.monotonic() - started
            killer.join(300)
            cpu = fleet.cpu_seconds()
            events.append(f"the restarted replica answered {served(fleet.gateways[1].url)} chat requests")
            upstream.clear()
    finally:
        upstream.stop()
    row = summary(results, cpu, {}, None)
    row.update({"seconds": elapsed, "events": events,
                "lost": sum(1 for r in results if r.status != 200)})
    return row


def served(url: str) -> int:
    """Chat completions a gateway answered 200, from its /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("mixpr_requests_total{") and 'path="/v1/chat/completions"' in line
                   and 'status="200"' in line))


def _kill_and_restart(fleet: Fleet, after_s: float, events: list[str], restarted_at: list[float]) -> None:
    time.sleep(after_s)
    fleet.kill(1)
    events.append(f"{after_s:.0f} s: replica 1 SIGKILLed")
    started = time.monotonic()
    fleet.restart(1)
    restarted_at.append(time.monotonic())
    events.append(f"{after_s + time.monotonic() - started:.0f} s: replica 1 ready again (cold, same port)")


def chosen(runs: list[agents.Trajectory], per_framework: int) -> list[agents.Trajectory]:
    """The ``per_framework`` shortest runs of each framework, in file order."""
    keep: set[str] = set()
    for framework in dict.fromkeys(r.framework for r in runs):
        ours = sorted((r for r in runs if r.framework == framework), key=lambda r: len(r.steps))
        keep |= {r.id for r in ours[:per_framework]}
    return [r for r in runs if r.id in keep]


def missing_tools() -> list[str]:
    found = [] if shutil.which("haproxy") else ["haproxy"]
    return found + ([] if available() else ["redis-server"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the two shortest runs of each framework")
    parser.add_argument("--limit", type=int, default=None, help="the first N runs of the dev split")
    parser.add_argument("--concurrency", type=int, default=1, help="runs replayed at once")
    parser.add_argument("--soak", action="store_true", help="kill and restart a replica mid-run")
    parser.add_argument("--clients", type=int, default=6, help="--soak: concurrent clients")
    parser.add_argument("--seconds", type=float, default=None, help="--soak: duration (60 quick, 180)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    missing = missing_tools()
    if missing:
        print(f"bench.replicas needs {' and '.join(missing)}: apt-get install -y {' '.join(missing)}")
        return 0
    runs = agents.trajectories()
    runs = chosen(runs, QUICK_PER_FRAMEWORK) if args.quick else runs[: args.limit]
    print(f"{len(runs)} runs, {sum(len(r.steps) for r in runs)} requests per pass; load: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if args.soak:
        seconds = args.seconds or (60.0 if args.quick else 180.0)
        result = soak(runs, args.replicas, args.clients, seconds)
        print(_soak_report(result, args.replicas, args.clients))
    else:
        result = compare(runs, standard_settings(args.replicas), args.concurrency)
        print(table(result, "1 replica"))
        print("\n".join(verdict(result, "1 replica", f"{args.replicas} replicas, Redis")))
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


def _soak_report(row: dict[str, Any], replicas: int, clients: int) -> str:
    lines = [f"soak: {clients} clients, {replicas} replicas + Redis, {row['seconds']:.0f} s",
             *(f"  {event}" for event in row["events"]),
             f"  requests {row['requests']}, 200s {row['requests'] - row['errors']}, lost {row['lost']}, "
             f"retried by the client {row['retried']}",
             f"  p50 {row['p50_ms']:.0f} ms, p95 {row['p95_ms']:.0f} ms, slowest {row['max_ms']:.0f} ms, "
             f"CPU {row['cpu_s']:.1f} s"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
