"""The operator's page (``/ui``, issue 58) with 10,000 recorded requests: how long it takes to load.

    .venv/bin/python -m bench.ui_page                  # 10,000 requests, 20 loads of each window
    .venv/bin/python -m bench.ui_page --requests 100000 --loads 10

Fills a SQLite stats store (``gateway.stats``) with ``--requests`` recorded requests over the last
day (three models, a mix of passthrough and compressed, warm and cold turns, resets; the per-request
record at its default bound), starts a real gateway process (``python -m gateway``) on it, logs in,
and times ``--loads`` page loads per window: the HTTP response (httpx: request to last byte, the
server's work included) and, when Debian's ``chromium`` is installed, the browser's load (Playwright,
navigation start to the ``load`` event). Prints median, p95 and max per window; the target is a p95
of at most 300 ms. One run on the machine it runs on: the figures say what it was, not a guarantee.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "gateway"), str(ROOT)]

from gateway.stats.batch import Batch  # noqa: E402
from gateway.stats.record import Record, Row  # noqa: E402
from gateway.stats.store import SqliteStore  # noqa: E402

KEY = "sk-bench-ui"
MODELS = ("claude-sonnet", "gpt-4o", "local-llama")
WINDOWS = ("all", "1h", "24h")
TARGET_MS = 300.0
RING = 1000  # general_settings.stats_recent's default


def record(rng: random.Random, at: float) -> Record:
    """One request as ``gateway.core.tally`` records it: numbers and labels only."""
    model = rng.choice(MODELS)
    before = rng.randint(200, 60_000)
    compressed = before > 8000
    after = rng.randint(2000, 8000) if compressed else before
    cache, reset = rng.choice(("warm", "warm", "warm", "cold", "")), rng.random() < 0.03
    priced = model != "local-llama"
    counts = {"requests": 1.0, f"requests_{'compressed' if compressed else 'passthrough'}": 1.0,
              "tokens_before": float(before), "tokens_after": float(after),
              "tokens_saved": float(before - after), "priced_requests": float(priced),
              "saved_compression": (before - after) * 3e-6 * priced,
              "resets": float(reset), "reset_write_cost": after * 3.45e-6 * reset * priced}
    if cache:
        counts[f"{cache}_turns"] = 1.0
    row = Row(at=at, model=model, route="forms" if cache else "local",
              action="compressed" if compressed else "passthrough", tokens_before=before,
              tokens_after=after, reset=reset, cache=cache, prices="litellm" if priced else "default")
    return Record(at=at, model=model, counts=counts, row=row)


def fill(path: Path, requests: int, seed: int = 0) -> float:
    """``requests`` records over the last day into the store at ``path``; seconds taken."""
    rng, now, started = random.Random(seed), time.time(), time.perf_counter()
    store = SqliteStore(str(path), retention_days=90, ring=RING)
    for first in range(0, requests, 1000):
        batch = Batch()
        for i in range(first, min(first + 1000, requests)):
            batch.add(record(rng, now - 24 * 3600 * (1 - i / requests)))
        store.write(batch)
    store.close()
    return time.perf_counter() - started


def config(path: Path, stats: Path) -> Path:
    params = {"model": "openai/bench-ui", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-unused"}
    raw = {"model_list": [{"model_name": m, "litellm_params": params} for m in MODELS],
           "general_settings": {"master_key": KEY, "stats_path": str(stats), "compression_workers": 1,
                                "compression_executor": "thread"}}
    path.write_text(yaml.safe_dump(raw))
    return path


def summary(name: str, times_ms: list[float]) -> str:
    ordered = sorted(times_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    verdict = "ok" if p95 <= TARGET_MS else f"OVER {TARGET_MS:.0f} ms"
    return (f"{name:<26} median {statistics.median(ordered):7.1f} ms  p95 {p95:7.1f} ms  "
            f"max {ordered[-1]:7.1f} ms  ({len(ordered)} loads; {verdict})")


def http_loads(url: str, cookie: str, window: str, loads: int) -> tuple[list[float], int]:
    times, size = [], 0
    with httpx.Client(base_url=url, cookies={"mixpr_ui": cookie}, timeout=30) as client:
        for _ in range(loads):
            started = time.perf_counter()
            response = client.get("/ui", params={"window": window})
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.status_code
            size = len(response.content)
    return times, size


def browser_loads(url: str, cookie: str, loads: int) -> dict[str, list[float]]:
    """Navigation start to the load event, per window, in headless Chromium; {} without it."""
    executable = shutil.which("chromium")
    if executable is None:
        print("chromium is not installed (Debian: apt-get install -y chromium): browser loads skipped")
        return {}
    from playwright.sync_api import sync_playwright

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    found: dict[str, list[float]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=args, headless=True)
        context = browser.new_context()
        context.add_cookies([{"name": "mixpr_ui", "value": cookie, "url": url}])
        page = context.new_page()
        for window in WINDOWS:
            found[window] = []
            for _ in range(loads):
                page.goto(f"{url}/ui?window={window}", wait_until="load")
                found[window].append(page.evaluate(
                    "() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return n.loadEventEnd - n.startTime; }"))
        browser.close()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args(argv)
    from processes import GatewayProcess

    from gateway.ui import session

    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        stats = Path(tmp) / "stats.sqlite3"
        print(f"{args.requests:,} recorded requests written in {fill(stats, args.requests):.2f} s "
              f"({stats.stat().st_size / 1e6:.1f} MB)")
        gateway = GatewayProcess(config(Path(tmp) / "config.yaml", stats)).wait()
        try:
            cookie = session.issue(KEY, 3600)
            http_loads(gateway.url, cookie, "all", 2)  # first loads: imports, connections
            for window in WINDOWS:
                times, size = http_loads(gateway.url, cookie, window, args.loads)
                print(summary(f"HTTP /ui?window={window}", times) + f"  {size / 1000:.0f} kB")
            for window, times in browser_loads(gateway.url, cookie, args.loads).items():
                print(summary(f"Chromium /ui?window={window}", times))
        finally:
            gateway.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
