"""bench.replicas' pure parts: the load balancer's config, the client's retries, the table's figures."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402
import pytest  # noqa: E402

from bench import agents, replicas  # noqa: E402


def test_haproxy_balances_every_request_round_robin_without_stickiness(tmp_path: Path) -> None:
    config = replicas.haproxy_config(8080, [9001, 9002, 9003])
    assert "balance roundrobin" in config
    assert not any(word in config for word in ("cookie", "stick", "source", "hash"))
    assert [line.split()[2] for line in config.splitlines() if line.strip().startswith("server")] == [
        "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"]
    assert "option redispatch" in config and "retries 3" in config
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (apt-get install -y haproxy): the syntax is not checked")
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    checked = subprocess.run(["haproxy", "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_the_client_retries_a_killed_replicas_502_and_counts_it() -> None:
    headers = {"x-mixpr-compress-ms": "12.5", "x-mixpr-new-forms": "3"}
    answers = iter([httpx.Response(502), httpx.Response(200, headers=headers)])
    transport = httpx.MockTransport(lambda request: next(answers))
    with httpx.Client(transport=transport, base_url="http://lb") as http, \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(replicas, "RETRY_PAUSE_S", 0.0)
        result = replicas.send(http, replicas.body([{"role": "user", "content": "hi"}], [], "bench-0-1"))
    assert (result.tag, result.status, result.attempts) == ("bench-0-1", 200, 2)
    assert (result.compress_ms, result.new_forms) == (12.5, 3)


def _result(tag: str, status: int = 200, ms: float = 10.0, attempts: int = 1) -> replicas.Result:
    return replicas.Result(tag, status, attempts, ms, 1.0, 1)


def test_the_summary_counts_every_request_whose_bytes_differ_or_never_arrived() -> None:
    results = [_result("a", ms=10), _result("b", ms=20), _result("c", status=502, attempts=5)]
    reference = {"a": "1", "b": "2", "c": "3"}
    row = replicas.summary(results, 4.0, {"a": "1", "b": "other"}, reference)
    assert row["bytes_differ"] == 2  # b changed, c never reached the upstream
    assert (row["requests"], row["errors"], row["retried"]) == (3, 1, 1)
    assert row["p50_ms"] == 15.0 and row["new_forms"] == 2  # failed requests have no time
    assert replicas.summary(results, 4.0, reference, reference)["bytes_differ"] == 0


def test_the_verdict_holds_the_shared_cache_to_the_issues_ratios() -> None:
    row = {"requests": 9, "errors": 0, "p50_ms": 50.0, "p95_ms": 100.0, "compress_p95_ms": 40.0,
           "new_forms": 4, "cpu_s": 10.0, "bytes_differ": None}
    rows = {"one": row, "shared": {**row, "p95_ms": 125.0, "cpu_s": 14.0, "bytes_differ": 0}}
    lines = replicas.verdict(rows, "one", "shared")
    assert lines[0].endswith("yes")
    assert "1.25" in lines[1] and lines[1].endswith("met)")
    assert "1.40" in lines[2] and "NOT met" in lines[2]
    assert "x p95" in replicas.table(rows, "one")


def test_quick_takes_the_shortest_runs_of_each_framework() -> None:
    def run(name: str, framework: str, steps: int) -> agents.Trajectory:
        messages = [{"role": "user", "content": "task"}]
        for _ in range(steps):
            messages += [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
        return agents.Trajectory(name, framework, messages, [], {})

    runs = [run("a", "f", 5), run("b", "f", 2), run("c", "f", 3), run("d", "g", 9)]
    assert [r.id for r in replicas.chosen(runs, 2)] == ["b", "c", "d"]
