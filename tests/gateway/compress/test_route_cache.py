"""The router's decisions: remembered by content, asked once per key, bounded in size."""

from __future__ import annotations

import asyncio

from gateway.compress.route_cache import RouteCache, route_key


async def test_identical_requests_wait_for_the_one_asking() -> None:
    cache = RouteCache(8)
    key = await cache.key("router", "the same long text")
    asked: list[str] = []

    async def request(name: str) -> str:
        decided = await cache.decided(key)
        if decided:
            return decided
        with cache.asking(key):
            asked.append(name)
            await asyncio.sleep(0.05)  # the router call
            cache.put(key, "global")
            return "global"

    first = asyncio.create_task(request("first"))
    await asyncio.sleep(0)  # the first one is asking now
    assert await asyncio.gather(first, request("second")) == ["global", "global"]
    assert asked == ["first"]


async def test_large_texts_hash_off_the_loop_to_the_same_key() -> None:
    text = "x" * 300_000
    assert await RouteCache(1).key("router", text) == route_key("router", text)
    assert route_key("a", "t") != route_key("b", "t")


def test_least_recently_used_decision_goes_first() -> None:
    cache = RouteCache(2)
    cache.put("a", "local")
    cache.put("b", "global")
    assert asyncio.run(cache.decided("a")) == "local"  # a is now the most recent
    cache.put("c", "local")
    assert [asyncio.run(cache.decided(k)) for k in "abc"] == ["local", None, "local"]


def test_size_zero_remembers_nothing() -> None:
    cache = RouteCache(0)
    cache.put("a", "local")
    assert asyncio.run(cache.decided("a")) is None
