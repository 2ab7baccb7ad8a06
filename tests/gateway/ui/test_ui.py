"""``/ui`` and ``/stats`` over real HTTP (an in-process gateway, a recording upstream, 127.0.0.1):
refused without the key or a valid login cookie (wrong signature, expired, another key's), the
cookie's attributes, bad input as a clear 4xx, the figures equal to the Prometheus counters, and a
prompt's text and the operator's keys in none of the page, ``/stats`` or the store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerThread
from fake_upstream import FakeUpstream
from mixed_run import (
    AUTH,
    CANARY,
    KEY,
    MODELS,
    UPSTREAM_KEY,
    agrees,
    chat,
    config,
    has_text,
    mismatches,
    page_figures,
    prometheus_figures,
    run,
    single,
    stats,
    wait_for_observe,
)
from redis_server import MISSING, RedisServer, available

from gateway import create_app
from gateway.config import ConfigError, parse_config
from gateway.ui import session


@pytest.fixture(scope="module")
def served(upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A gateway with a SQLite store, after the mixed run."""
    path = tmp_path_factory.mktemp("ui") / "stats.sqlite3"
    raw = config(upstream.base_url, general={"stats_path": str(path)})
    server = ServerThread(create_app(parse_config(raw))).start()
    run(server.url, steps=8)
    wait_for_observe([server.url], 1)
    yield server.url, path
    server.stop()


def _login(url: str, key: str = KEY) -> httpx.Response:
    return httpx.post(url + "/ui/login", data={"key": key}, timeout=10)


def _with_cookie(url: str, path: str, cookie: str) -> httpx.Response:
    return httpx.get(url + path, cookies={session.COOKIE: cookie}, timeout=30)


def test_unauthenticated_reads_are_refused(served: tuple[str, Path]) -> None:
    url, _ = served
    page = httpx.get(url + "/ui", timeout=10)
    assert page.status_code == 303 and page.headers["location"] == "/ui/login" and not page.text
    form = httpx.get(url + "/ui", timeout=10, follow_redirects=True)
    assert form.status_code == 200 and 'name="key"' in form.text and "data-stat" not in form.text
    assert httpx.get(url + "/stats", timeout=10).status_code == 401
    wrong = httpx.get(url + "/stats", headers={"Authorization": "Bearer sk-not-the-key"}, timeout=10)
    assert wrong.status_code == 401


@pytest.mark.parametrize("cookie", [
    session.issue(KEY, 600)[:-2] + "00",  # the signature changed
    session.issue(KEY, 60, now=time.time() - 120),  # expired a minute ago
    session.issue("sk-another-deployment", 600),  # signed with another key
    str(int(time.time()) + 600),  # no signature at all
    "",
# Named ids: the values hold the time, and xdist's workers must collect the same test names.
], ids=["changed-signature", "expired", "other-key", "unsigned", "empty"])
def test_a_cookie_wrongly_signed_or_expired_is_refused(served: tuple[str, Path], cookie: str) -> None:
    url, _ = served
    page = _with_cookie(url, "/ui", cookie)
    assert page.status_code == 303 and "data-stat" not in page.text
    assert _with_cookie(url, "/stats", cookie).status_code == 401


def test_the_login_cookie_is_signed_expiring_http_only_and_strict(served: tuple[str, Path]) -> None:
    url, _ = served
    refused = _login(url, "sk-wrong")
    assert refused.status_code == 401 and "not the master key" in refused.text
    assert "set-cookie" not in refused.headers
    login = _login(url)
    assert login.status_code == 303 and login.headers["location"] == "/ui"
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "max-age=28800" in cookie
    value = login.cookies[session.COOKIE]
    assert KEY not in value and session.valid(KEY, value)
    page = _with_cookie(url, "/ui", value)
    assert page.status_code == 200 and "data-stat" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert _with_cookie(url, "/stats", value).json()["window"] == "all"


def test_bad_input_is_a_clear_4xx(served: tuple[str, Path]) -> None:
    url, _ = served
    bad = httpx.get(url + "/stats", params={"window": "7d"}, headers=AUTH, timeout=10)
    assert bad.status_code == 400 and "window must be one of all, 1h, 24h" in bad.json()["error"]["message"]
    as_json = httpx.post(url + "/ui/login", json={"key": KEY}, timeout=10)
    assert as_json.status_code == 415
    too_long = httpx.post(url + "/ui/login", data={"key": "k" * 5000}, timeout=10)
    assert too_long.status_code == 413
    fields = httpx.post(url + "/ui/login", content="a=1&b=2&c=3&d=4&e=5&key=x", timeout=10,
                        headers={"content-type": "application/x-www-form-urlencoded"})
    assert fields.status_code == 400


def test_the_figures_equal_the_prometheus_counters(served: tuple[str, Path]) -> None:
    url, _ = served
    data = stats(url)
    assert set(data["models"]) == set(MODELS)
    for model in (None, *MODELS):
        figures = data["models"][model] if model else data["totals"]
        assert mismatches(figures, prometheus_figures([url], model)) == []
    totals = data["totals"]
    # The run's mix, as the figures see it: every kind of request, both priced and not.
    assert totals["requests_passthrough"] and totals["requests_compressed"] and totals["resets"]
    assert totals["observe_requests"] >= 2 and totals["observe_tokens_saved"] > 0
    assert 0 < totals["priced_share"] < 1 and data["models"]["plain"]["priced_share"] == 0
    assert data["models"]["plain"]["saved_compression"] == 0 < data["models"]["plain"]["tokens_saved"]
    assert data["models"]["agent"]["reset_write_cost"] > 0 and data["models"]["observed"]["observe_saved"] > 0
    assert data["models"]["cached"]["provider_cache_read_tokens"] == 8  # the fake upstream's usage
    routed = data["models"]["routed"]
    assert routed["escalations"] == 1 and routed["escalation_cost"] > 0
    assert routed["net_saved"] == routed["saved_compression"] - routed["escalation_cost"]
    page = httpx.get(url + "/ui", cookies={session.COOKIE: session.issue(KEY, 60)}, timeout=30).text
    assert agrees(page_figures(page), data) == []


def _stored(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))  # the file, its WAL


def test_no_prompt_text_nor_key_reaches_the_page_stats_or_store(served: tuple[str, Path]) -> None:
    url, path = served
    cookie = {session.COOKIE: session.issue(KEY, 60)}
    texts: list[Any] = [httpx.get(url + "/ui", params={"window": w}, cookies=cookie, timeout=30).text
                        for w in ("all", "1h", "24h")]
    texts += [httpx.get(url + "/stats", params={"window": w}, headers=AUTH, timeout=30).text
              for w in ("all", "1h", "24h")]
    for blob in [*texts, _stored(path)]:
        assert has_text(blob, CANARY, KEY, UPSTREAM_KEY, "secret code", "Fix the bug") == []
    assert len(stats(url)["recent"]) > 10  # the record is there, without the text


def test_no_page_without_a_key_off_loopback(upstream: FakeUpstream) -> None:
    """Served on a non-loopback address with no master key (something in front authenticates the
    API), the page and its JSON still refuse: they would show every tenant's traffic."""
    raw = config(upstream.base_url, general={"allow_unauthenticated": True})
    del raw["general_settings"]["master_key"]
    server = ServerThread(create_app(parse_config(raw), host="0.0.0.0")).start()
    try:
        assert httpx.get(server.url + "/ui", timeout=10).status_code == 403
        assert httpx.get(server.url + "/stats", timeout=10).status_code == 403
    finally:
        server.stop()


async def test_a_stats_path_it_cannot_open_stops_start_up_with_the_setting_named(
        upstream: FakeUpstream, tmp_path: Path) -> None:
    raw = config(upstream.base_url, general={"stats_path": str(tmp_path)})  # a folder, not a file
    app = create_app(parse_config(raw))
    with pytest.raises(ConfigError, match="general_settings.stats_path .*cannot open the stats store"):
        async with app.state.gateway.lifespan(app):
            pass


def test_a_store_that_cannot_be_read_is_a_503_and_requests_go_on(upstream: FakeUpstream,
                                                                 tmp_path: Path) -> None:
    if not available():
        pytest.skip(MISSING)
    redis = RedisServer(tmp_path / "redis").start()
    general = {"form_cache_url": redis.url, "deployment_secret": "ui-store-down-" + "s" * 32}
    server = ServerThread(create_app(parse_config(config(upstream.base_url, general=general)))).start()
    try:
        chat(server.url, "plain", single("Say hello."))
        assert stats(server.url)["totals"]["requests"] == 1
        redis.kill()
        down = httpx.get(server.url + "/stats", headers=AUTH, timeout=30)
        assert down.status_code == 503 and "stats store cannot be read" in down.json()["error"]["message"]
        assert down.headers["retry-after"] == "5"
        chat(server.url, "plain", single("Say hello again."))  # the page's store is never on the request path
    finally:
        server.stop()
        redis.stop()
