"""The operator's page in a real browser: headless Chromium (Debian's ``chromium`` package, launched
by Playwright through ``executable_path``; no browser download) in front of real gateway processes.

After a mixed run (passthrough, compressed, a conversation with a reset, observe mode, two models of
which one has no price), the test logs in, reads every ``data-stat`` figure and checks it equals
``/stats``, which equals the Prometheus counters; stops the gateway (SQLite), or both replicas
sharing one Redis, starts one again and reads it again; checks no console error and no prompt text.
The SQLite run saves the screenshot the docs show (docs/images/operator-page.png)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from fake_upstream import FakeUpstream
from mixed_run import (
    CANARY,
    KEY,
    MODELS,
    UPSTREAM_KEY,
    agrees,
    chat,
    config,
    has_text,
    mismatches,
    prometheus_figures,
    run,
    single,
    stats,
    wait_for_observe,
)
from processes import ROOT, GatewayProcess
from redis_server import MISSING, RedisServer, available

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

BROWSER = "chromium"
NO_BROWSER = ("Chromium is not installed: the browser tests need Debian's `chromium` package "
              "(apt-get install -y chromium; .ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT = ROOT / "docs" / "images" / "operator-page.png"
SECRET = "ui-replicas-deployment-secret-" + "s" * 32


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright
    executable = shutil.which(BROWSER)
    if executable is None:
        pytest.skip(NO_BROWSER)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        yield launched
        launched.close()


class Gateways:
    """One gateway (SQLite) or two replicas (one Redis), restartable on the same config."""

    def __init__(self, config_path: Path, replicas: int, logs: Path, redis: RedisServer | None) -> None:
        self.config_path = config_path
        self.replicas = replicas
        self.logs = logs
        self.redis = redis
        self.started: list[GatewayProcess] = []

    def stored(self) -> bytes:
        """Everything the store holds: the SQLite file (and its WAL), or every stats key and value in
        Redis (beside them, the shared form cache holds message forms: prompt text, by design)."""
        if self.redis is None:
            return b"".join(p.read_bytes() for p in self.logs.glob("data/stats.sqlite3*"))
        client = self.redis.client()
        keys = client.keys("mixpr:stats:*")
        assert keys
        return b"".join(k + _value(client, k) for k in keys)

    def start(self, replicas: int | None = None) -> list[str]:
        self.started = [GatewayProcess(self.config_path, self.logs / f"gateway-{i}.log")
                        for i in range(replicas or self.replicas)]
        return [g.wait().url for g in self.started]

    def stop(self) -> None:
        for gateway in self.started:
            gateway.stop()


@pytest.fixture(params=["sqlite", "redis"])
def gateways(request: pytest.FixtureRequest, upstream: FakeUpstream,
             tmp_path: Path) -> Iterator[tuple[str, Gateways]]:
    redis = None
    if request.param == "redis":
        if not available():
            pytest.skip(MISSING)
        redis = RedisServer(tmp_path / "redis").start()
        general: dict[str, Any] = {"form_cache_url": redis.url, "deployment_secret": SECRET}
    else:
        general = {"stats_path": str(tmp_path / "data" / "stats.sqlite3")}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config(upstream.base_url, general=general)))
    started = Gateways(path, 2 if redis else 1, tmp_path, redis)
    try:
        yield request.param, started
    finally:
        started.stop()
        if redis is not None:
            redis.stop()


def _value(client: Any, key: bytes) -> bytes:
    """A key's value as stored, uncompressed (DUMP may compress it with LZF)."""
    kind = client.type(key)
    if kind == b"hash":
        return b"".join(f + v for f, v in client.hgetall(key).items())
    if kind == b"list":
        return b"".join(client.lrange(key, 0, -1))
    return client.get(key) or b"" if kind == b"string" else repr(kind).encode()


def _login(page: Page, url: str) -> None:
    page.goto(url + "/ui")
    assert page.url.endswith("/ui/login") and page.locator("[data-stat]").count() == 0
    page.fill("input[name=key]", KEY)
    page.click("button")
    page.wait_for_selector("[data-stat]")


def _shown(page: Page) -> dict[tuple[str, str | None], str]:
    """Every figure as the browser renders it: (data-stat, data-model) -> data-value."""
    found = page.eval_on_selector_all(
        "[data-stat]", "els => els.map(e => [e.dataset.stat, e.dataset.model ?? null, e.dataset.value])")
    return {(name, model): value for name, model, value in found}


def _check(page: Page, urls: list[str], prometheus_urls: list[str] | None) -> dict[str, Any]:
    """The page equals /stats for each window, and /stats the counters of ``prometheus_urls`` (the
    processes that counted everything; None after a restart, when Prometheus started from 0)."""
    data: dict[str, Any] = {}
    for window in ("all", "1h", "24h"):
        page.goto(f"{urls[0]}/ui?window={window}")
        data[window] = stats(urls[0], window)
        assert agrees(_shown(page), data[window]) == [], window
        assert has_text(page.content(), CANARY, KEY, UPSTREAM_KEY) == []
    for url in urls[1:]:  # every replica reads the same store
        assert stats(url)["totals"] == data["all"]["totals"]
    if prometheus_urls is not None:
        for model in (None, *MODELS):
            figures = data["all"]["models"][model] if model else data["all"]["totals"]
            assert mismatches(figures, prometheus_figures(prometheus_urls, model)) == [], model
    return data["all"]


def test_the_page_shows_what_the_gateway_counted_across_a_restart(
        browser: Browser, gateways: tuple[str, Gateways]) -> None:
    """A minute under load: it starts gateway processes twice (a restart is what it is about), and
    Chromium renders the page after each."""
    kind, started = gateways
    urls = started.start()
    seen: dict[str, int] = {}
    for url in urls:  # with two replicas, each takes part of the traffic
        for name, count in run(url, steps=10).items():
            seen[name] = seen.get(name, 0) + count
    assert seen.get("x-mixpr-reset=true") and seen.get("x-mixpr-action=compressed")
    assert seen.get("x-mixpr-shadow=sampled") and seen.get("x-mixpr-shadow=unchanged")
    assert seen.get("x-mixpr-self-route=escalated")
    wait_for_observe(urls, len(urls))
    errors: list[str] = []
    context = browser.new_context()
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if _is_error(m) else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    _login(page, urls[0])
    before = _check(page, urls, urls)
    assert before["totals"]["resets"] > 0 and 0 < before["totals"]["priced_share"] < 1
    if kind == "sqlite":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.goto(urls[0] + "/ui?window=24h")
        page.screenshot(path=str(SCREENSHOT), full_page=True)

    started.stop()
    # Every process stopped; one is started again (the replicas' reading one store was checked above):
    # what it shows can only come from the store.
    urls = started.start(replicas=1)
    # No login again: the cookie outlives the process (signed with the master key; cookies ignore ports).
    after = _check(page, urls, None)
    assert after["totals"] == before["totals"] and after["models"] == before["models"]
    chat(urls[0], "plain", single("Once more."))  # counted on top of what was kept
    again = stats(urls[0])["totals"]
    assert again["requests"] == before["totals"]["requests"] + 1
    assert mismatches({n: again[n] - before["totals"][n] for n in again if n in _COUNTED},
                      {n: v for n, v in prometheus_figures(urls, None).items() if n in _COUNTED}) == []
    assert errors == []
    context.close()
    assert has_text(started.stored(), CANARY, KEY, UPSTREAM_KEY, "Fix the bug", "secret code") == []


_COUNTED = {"requests", "requests_passthrough", "tokens_before", "tokens_after"}


def _is_error(message: ConsoleMessage) -> bool:
    return message.type == "error"
