"""Start-up (issue 59): seconds from launching ``mixpr-gateway`` to a 200 on ``/health/liveliness`` and
on ``/health/readiness``, median of N starts, with one OpenAI-compatible model and no embedded server.
Then, on each start, the first compressed request after readiness against the steady state: a real
contract of the dev split (``legal_contract_qa``, 84k characters) with one question, then with
``STEADY`` other questions, each over a 16k window, answered by a local stand-in upstream; seconds
from sending to the answer. The question asked first turns with each start, and each question's time
as a first request is set against its own median as a later one: that difference is the first
request's cost of a fresh process alone (questions differ by a few milliseconds among themselves).
``--pause S`` waits S seconds before every request, the first included: the first request always
follows a pause, and on this machine a request after one takes a few milliseconds more than one sent
back to back.

``--against PATH`` times another checkout (its own ``.venv``, e.g. ``/work/main``) in the same run, its
starts alternating with this one's, so both see the same load; the load average is printed beside them.

    .venv/bin/python -m bench.startup                          # 5 starts of this checkout
    .venv/bin/python -m bench.startup --against ../main        # old beside new, alternating
    .venv/bin/python -m bench.startup --runs 9 --json out/startup.json
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("/health/liveliness", "/health/readiness")
FIRST, LATER = "first request", "steady state"
PAIRED = "first minus the same request later"
POLL_S = 0.02  # finer than any difference worth reporting, coarse enough not to load the machine
GIVE_UP_S = 300.0  # a loaded 2-core machine has taken over a minute
# Nothing listens on port 9 (discard): a start must not need its upstream.
MODEL = {"model_name": "m", "litellm_params": {"model": "openai/x", "api_base": "http://127.0.0.1:9/v1",
                                               "api_key": "x"}}
CONTRACTS = ROOT.parent / "shared" / "data" / "real" / "legal_contract_qa.dev.jsonl"
CONTRACT = 4  # an 84k-character contract: cut to the 16k window
STEADY = 5  # requests after the first, each with another question: the steady state
ANSWER = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "x",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "ok"}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


@dataclass
class Checkout:
    """One checkout to time: its folder (holding ``.venv``) and the seconds of each start, per path."""

    root: Path
    seconds: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in (*PATHS, FIRST, LATER)})
    firsts: list[tuple[int, float]] = field(default_factory=list)  # (question, seconds) of each start
    later: dict[int, list[float]] = field(default_factory=dict)  # question -> its seconds when not first

    @property
    def python(self) -> Path:
        return self.root / ".venv" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(folder: Path, upstream: str) -> Path:
    """One model on nothing (what the start needs) and one 16k-window model on the stand-in upstream."""
    windowed = {"model_name": "w", "model_info": {"max_input_tokens": 16_000},
                "litellm_params": {"model": "openai/w", "api_base": upstream, "api_key": "x"}}
    path = folder / "startup.yaml"
    path.write_text(json.dumps({"model_list": [MODEL, windowed]}))  # JSON is YAML
    return path


class _Upstream(http.server.BaseHTTPRequestHandler):
    """Answers every chat completion at once: the bench times the gateway, not a model."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: object) -> None:
        return None


def upstream() -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def requests() -> list[bytes]:
    """The first request's body, then the steady state's: one contract, a question each."""
    row = json.loads(CONTRACTS.read_text().splitlines()[CONTRACT])
    return [json.dumps({"model": "w", "max_tokens": 50, "messages": [
        {"role": "user", "content": f"{row['input']}\n\n{question}"}]}).encode()
        for question in row["instructions"][: 1 + STEADY]]


def answer_s(port: int, body: bytes, pause_s: float = 0.0) -> float:
    """Seconds to a compressed answer for ``body``, sent after ``pause_s`` seconds."""
    time.sleep(pause_s)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    begun = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        action = response.getheader("x-mixpr-action")
        if response.status != 200 or action != "compressed":
            raise RuntimeError(f"expected a compressed 200, got {response.status} {action}")
        return time.monotonic() - begun
    finally:
        conn.close()


def status(port: int, path: str) -> int | None:
    """The status ``path`` answers with now, or None while nothing listens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def time_start(checkout: Checkout, config: Path, first_question: int = 0,
               pause_s: float = 0.0) -> dict[str, float]:
    """Launch one gateway, poll both health paths until each answers 200, send the requests (question
    ``first_question`` first), stop it."""
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    argv = [str(checkout.python), "-m", "gateway", "--config", str(config), "--port", str(port),
            "--log-level", "warning"]
    begun = time.monotonic()
    proc = subprocess.Popen(argv, cwd=checkout.root, env=env, stdout=subprocess.DEVNULL)
    found: dict[str, float] = {}
    try:
        while len(found) < len(PATHS):
            if proc.poll() is not None or time.monotonic() - begun > GIVE_UP_S:
                raise RuntimeError(f"{checkout.root}: gateway exited or never became ready")
            for path in PATHS:
                if path not in found and status(port, path) == 200:
                    found[path] = time.monotonic() - begun
            time.sleep(POLL_S)
        bodies = requests()
        order = [(first_question + k) % len(bodies) for k in range(len(bodies))]
        times = {i: answer_s(port, bodies[i], pause_s) for i in order}
        found[FIRST] = times[first_question]
        found[LATER] = statistics.median(s for i, s in times.items() if i != first_question)
        checkout.firsts.append((first_question, times[first_question]))
        for i, seconds in times.items():
            if i != first_question:
                checkout.later.setdefault(i, []).append(seconds)
    finally:
        stop(proc)
    return found


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(checkouts: list[Checkout], runs: int, pause_s: float = 0.0) -> None:
    """``runs`` starts of each checkout, alternating, so a change in load hits both alike."""
    with tempfile.TemporaryDirectory() as folder:
        stand_in = upstream()
        config = write_config(Path(folder), f"http://127.0.0.1:{stand_in.server_address[1]}/v1")
        for i in range(runs):
            for checkout in checkouts:
                for path, seconds in time_start(checkout, config, i % (1 + STEADY), pause_s).items():
                    checkout.seconds[path].append(seconds)
                times = ", ".join(f"{p.rsplit('/', 1)[-1]} {s[-1]:.{_places(p)}f} s"
                                  for p, s in checkout.seconds.items())
                print(f"  start {i + 1}/{runs} {checkout.root}: {times}", flush=True)


def report(checkouts: list[Checkout], load: tuple[float, ...], pause_s: float = 0.0) -> dict[str, object]:
    # Starts to the 10 ms (the poll is 20 ms), requests to the millisecond (they differ by a few).
    rows = {str(c.root): {p.rsplit("/", 1)[-1]: {"median_s": round(statistics.median(s), _places(p)),
                                               "runs_s": [round(x, _places(p)) for x in s]}
                          for p, s in c.seconds.items()} | {PAIRED: paired(c)}
            for c in checkouts}
    print(f"\nmedian of {len(checkouts[0].seconds[PATHS[0]])} starts to a 200 "
          f"(load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; "
          f"{pause_s:g} s before each request):")
    for root, row in rows.items():
        print(f"  {root:40} liveliness {row['liveliness']['median_s']:6.2f} s   "
              f"readiness {row['readiness']['median_s']:6.2f} s   first compressed request "
              f"{row[FIRST]['median_s']:6.3f} s, steady state {row[LATER]['median_s']:6.3f} s, "
              f"first minus the same request later {row[PAIRED]['median_ms']:+5.1f} ms")
    return {"load_before": load[0], "load_after": os.getloadavg()[0], "pause_s": pause_s, "checkouts": rows}


def paired(checkout: Checkout) -> dict[str, object]:
    """Each start's first request minus the median of the same question's times as a later request."""
    ms = [round((seconds - statistics.median(checkout.later[question])) * 1000, 1)
          for question, seconds in checkout.firsts if checkout.later.get(question)]
    return {"median_ms": statistics.median(ms) if ms else float("nan"), "runs_ms": ms}


def _places(path: str) -> int:
    return 2 if path in PATHS else 3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, action="append", default=[],
                        help="another checkout with its own .venv, timed in the same run (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds to wait before every request, the first included (default: none)")
    args = parser.parse_args(argv)
    checkouts = [Checkout(ROOT), *(Checkout(p.resolve()) for p in args.against)]
    load = os.getloadavg()
    run(checkouts, args.runs, args.pause)
    result = report(checkouts, load, args.pause)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
