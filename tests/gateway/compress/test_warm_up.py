"""A compression worker's warm-up (issue 59): what the first request would pay for is paid before
readiness, in the worker itself, and what start-up loaded is out of the collector's reach."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_probe import page_faults_of_a_job, tracked_objects

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

import mixpr.engine  # noqa: E402
from gateway.compress import compressor, warm_up  # noqa: E402
from gateway.compress.compressor import router_models, start_pool  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.run.workers import Workers  # noqa: E402


async def test_a_worker_starts_with_what_start_up_loaded_frozen() -> None:
    # A full collection in a worker walking LiteLLM's and scikit-learn's objects held a job 270 ms.
    workers = Workers(workers=1, executor="process")
    try:
        await start_pool(workers, with_router=False)
        tracked = await workers.run(tracked_objects)
    finally:
        workers.close()
    # Unfrozen, the worker's collector tracks about 140k objects after this warm-up (446k with LiteLLM).
    assert tracked < 10_000


CONTRACTS = Path(__file__).resolve().parents[4] / "shared" / "data" / "real" / "legal_contract_qa.dev.jsonl"


async def test_a_workers_first_real_job_finds_its_pages_already_copied() -> None:
    # A worker copies each page of its fork server's it first touches, 10 us or so apiece here: its
    # warm-up's job touches them, so a user's first long prompt does not (about 3,000 pages without).
    if not CONTRACTS.exists():
        pytest.skip(f"needs the dev split beside the repository ({CONTRACTS})")
    contract = json.loads(CONTRACTS.read_text().splitlines()[4])  # 84k characters, as bench.startup's
    text = f"{contract['input']}\n\n{contract['instructions'][0]}"
    workers = Workers(workers=1, executor="process")
    try:
        await start_pool(workers, with_router=False)
        first = await workers.run(page_faults_of_a_job, text)
    finally:
        workers.close()
    # Still more than a later job's 40: the heap grows to this text's size. A warm-up job over one plain
    # sentence 1,200 times left 260 to 310 here; over the contract-like sample (warm_up), 130 to 160.
    assert first < 220


def test_the_fork_servers_preloads_freeze_what_they_load() -> None:
    # Imported by the fork server before it forks: each worker inherits the frozen objects.
    probe = ("import gc\n"
             "def tracked(): return sum(len(gc.get_objects(g)) for g in range(3))\n"
             "import gateway.compress.preload\n"
             "first = tracked()\n"
             "import gateway.compress.preload_router\n"
             "print(first, tracked())\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, check=True)
    after_tables, after_litellm = map(int, done.stdout.split())
    assert after_tables < 1_000  # 140k objects unfrozen
    assert after_litellm < 1_000  # 300k more


def test_the_warm_up_freezes_what_it_built(asked: list[tuple[str, str]]) -> None:
    # What a worker's own warm-up left (and whatever it had before) is frozen too: tracked, a
    # full collection in this process would walk pytest's objects and the suite's.
    compressor._warm_up(False)
    assert sum(len(gc.get_objects(generation)) for generation in range(3)) < 1_000


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """The (model, api_base) of every ``litellm.completion`` call, answered as usual; and the
    collector as it was, since the warm-up freezes this process's objects."""
    calls: list[tuple[str, str]] = []
    completion = litellm.completion

    def recording(**kwargs: Any) -> Any:
        calls.append((kwargs["model"], kwargs["api_base"]))
        return completion(**kwargs)

    monkeypatch.setattr(litellm, "completion", recording)
    yield calls
    gc.unfreeze()


def test_the_warm_up_asks_each_router_model_on_loopback(asked: list[tuple[str, str]]) -> None:
    # The first routing question paid for its model's own lookups (its price, or the lack of one).
    compressor._warm_up(True, ("openai/the-router", "bedrock/a-cloud-model"))
    models = [model for model, _ in asked]
    assert "openai/the-router" in models
    # Another provider's way out may look for credentials first (a cloud's metadata server): not asked.
    assert "bedrock/a-cloud-model" not in models
    assert {base.split("/")[2].split(":")[0] for _, base in asked} == {"127.0.0.1"}


def test_without_the_router_no_model_is_asked(asked: list[tuple[str, str]]) -> None:
    compressor._warm_up(False, ("openai/the-router",))
    assert asked == []


def test_the_router_models_are_those_the_auto_router_asks() -> None:
    config = parse_config({
        "model_list": [
            {"model_name": "asks-itself", "litellm_params": {"model": "openai/one"}},
            {"model_name": "asks-another", "litellm_params": {"model": "openai/two"},
             "mixpr": {"router_model": "judge"}},
            {"model_name": "judge", "litellm_params": {"model": "openai/judge"},
             "mixpr": {"router": "heuristic"}},
            {"model_name": "never-asks", "litellm_params": {"model": "openai/three"},
             "mixpr": {"router": "local"}},
        ],
    })
    assert router_models(config) == ("openai/judge", "openai/one")


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """This process as if nothing had warmed in it yet; the pid of every MixPR job run meanwhile."""
    monkeypatch.setattr(warm_up, "_WARMED", {})
    jobs: list[int] = []
    compress = mixpr.engine.compress

    def recording(*args: Any, **kwargs: Any) -> Any:
        jobs.append(os.getpid())
        return compress(*args, **kwargs)

    monkeypatch.setattr(mixpr.engine, "compress", recording)
    yield jobs
    gc.unfreeze()  # the thread pools' warm-up froze this process's objects


async def test_a_second_pool_in_the_same_process_finds_it_warm(fresh_process: list[int]) -> None:
    # The LiteLLM plug-in's guardrails each start a compressor in the proxy's process; the warm-up's
    # job (a tenth of a second, and its count of 53k tokens twice) is that process's once.
    for _ in range(2):
        workers = Workers(workers=1, executor="thread")
        try:
            await start_pool(workers, with_router=False)
        finally:
            workers.close()
    assert fresh_process == [os.getpid()]


def test_a_process_forked_after_the_warm_up_warms_again(fresh_process: list[int]) -> None:
    # Its pages are its parent's until it touches them: a pool's worker runs its own warm-up.
    warm_up.first_job()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        warm_up.first_job()
        os.write(write, str(fresh_process).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        jobs_seen_by_child = pipe.read()
    os.waitpid(child, 0)
    assert fresh_process == [os.getpid()]
    assert jobs_seen_by_child == str([os.getpid(), child])
