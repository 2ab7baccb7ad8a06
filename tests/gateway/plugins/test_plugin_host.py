"""The plug-in in a process that holds what a LiteLLM proxy holds: one process for two checks.

Loading the plug-in changes nothing in its host: LiteLLM's and the openai SDK's globals stay as they
were. The process loads what a LiteLLM proxy has loaded (its proxy server module), records every
global of LiteLLM, the openai SDK and the classes and modules the gateway's app patches (by identity,
so a rebound function or a replaced setting shows), then imports the plug-in, builds it and runs a
request through it, and records again. The gateway's own ``install()``, run last, must change them:
the check sees what it is meant to see.

The plug-in's state is bounded by the proxy's ``model_list``, not by what clients send. In between,
the process holds LiteLLM's real ``Router`` as ``proxy_server.llm_router``, with one model group, as a
proxy does when it calls the plug-in. 1,000 long requests, each naming a model the proxy does not
list, go through a second plug-in's ``apply_guardrail``; they pass through untouched, and the plug-in's
memory (``tracemalloc``, from the 100th request to the 1,000th, modules imported on the way aside), its
services and its metric samples stay flat. A listed model is still compressed, with one set of labels.

Both checks need a process that has imported LiteLLM's proxy and nothing of the gateway (12
CPU-seconds), so one script does both and prints one JSON report (issue 59), each check's part apart:
a check that raises reports its traceback, and the other still runs. It is forked from the run's
LiteLLM zygote, which has imported just that (``tests/zygote.py``), else a fresh interpreter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.zygote import litellm_process

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import asyncio, gc, json, sys, traceback, tracemalloc
import litellm, openai
import litellm.proxy.proxy_server  # what the host has loaded before it reads its guardrails
from litellm.proxy import proxy_server
import litellm.litellm_core_utils.litellm_logging as litellm_logging
import openai.resources.chat.completions.completions as chat_resource
import openai.resources.completions as completions_resource
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig

report = {}

def part(name, check):
    try:
        report[name] = check()
    except BaseException:
        report[name] = {"error": traceback.format_exc()}

# -- globals: importing and using the plug-in leaves them alone -------------------------------------

WATCHED = {"litellm": vars(litellm), "openai": vars(openai), "litellm_logging": vars(litellm_logging),
           "chat_resource": vars(chat_resource), "completions_resource": vars(completions_resource),
           "OpenAIGPTConfig": OpenAIGPTConfig.__dict__}

def snapshot():  # identities only: repr() would load the openai module's lazy client proxies
    return {f"{where}.{name}": id(value)
            for where, names in WATCHED.items() for name, value in list(names.items())}

def changed(before, after):
    return sorted(k for k, v in before.items() if k in after and after[k] != v)

def plugin_globals():
    before = snapshot()
    from gateway.plugins.litellm_guardrail import MixPRGuardrail

    async def use():
        guard = MixPRGuardrail(guardrail_name="mixpr", compression_executor="thread", compression_workers=1,
                               router="heuristic")
        inputs = {"texts": ["hi"], "structured_messages": [{"role": "user", "content": "hi"}]}
        out = await guard.apply_guardrail(inputs, {"model": "not-listed", "litellm_call_id": "c1"}, "request")
        assert out == inputs, out
        (await guard._pool()).close()  # the pool started with the guardrail, as in a proxy

    asyncio.run(use())
    return {"plugin": changed(before, snapshot())}

part("globals", plugin_globals)

# -- state: 1,000 unlisted model names ---------------------------------------------------------------

LONG = " ".join(f"Sentence {i} says the falcon flew over hill {i}." for i in range(2500))

# A module LiteLLM imports lazily along the way is a one-off, not state kept per request.
NOT_IMPORTS = [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]

def allocated():
    gc.collect()
    return sum(s.size for s in tracemalloc.take_snapshot().filter_traces(NOT_IMPORTS).statistics("filename"))

def samples(guard):
    return sum(len(metric.samples) for metric in guard.metrics.registry.collect())

async def main():
    from gateway.plugins.litellm_guardrail import MixPRGuardrail

    guard = MixPRGuardrail(guardrail_name="mixpr", compression_executor="thread", compression_workers=1,
                           router="heuristic", budget_tokens=400)
    await guard._pool()
    async def ask(model, n):
        inputs = {"texts": [LONG], "structured_messages": [{"role": "user", "content": LONG}]}
        data = {"model": model, "litellm_call_id": f"c{n}"}
        return inputs, await guard.apply_guardrail(inputs, data, "request")
    inputs, out = await ask("small", 0)
    compressed = len(out["texts"][0]) < len(LONG) / 2
    base_samples = samples(guard)
    tracemalloc.start()
    for n in range(1, 1001):
        inputs, out = await ask(f"unlisted-model-{n}", n)
        assert out == inputs
        if n == 100:
            at_100 = allocated()
    at_1000 = allocated()
    tracemalloc.stop()
    guard._compressor.close()
    return {"compressed": compressed, "services": len(guard._services),
            "samples": [base_samples, samples(guard)], "growth": at_1000 - at_100}

def plugin_state():
    proxy_server.llm_router = litellm.Router(model_list=[{
        "model_name": "small", "model_info": {"max_input_tokens": 3000},
        "litellm_params": {"model": "openai/small", "api_base": "http://127.0.0.1:9", "api_key": "sk-x"}}])
    return asyncio.run(main())

part("state", plugin_state)

# -- the gateway's own install() changes them: the globals check sees what it is meant to see --------

def gateway_install():
    before = snapshot()
    from gateway.upstream import patches
    patches.install()
    return {"install": changed(before, snapshot()), "retries": litellm.DEFAULT_MAX_RETRIES}

part("install", gateway_install)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The script's report: a process that has imported LiteLLM's proxy (forked from the run's LiteLLM
    zygote when there is one, ``tests/zygote.py``) sends 1,001 requests through the plug-in: up to a
    minute under load."""
    folder = tmp_path_factory.mktemp("plugin-host")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    process = litellm_process([], env, folder / "stderr", code=SCRIPT, cwd=ROOT, stdout=folder / "stdout")
    assert process.wait(600) == 0, (folder / "stderr").read_text()[-3000:]
    return json.loads((folder / "stdout").read_text().strip().splitlines()[-1])


def _part(report: dict[str, Any], name: str) -> dict[str, Any]:
    found = report[name]
    assert "error" not in found, found["error"]
    return found


def test_importing_and_using_the_plugin_leaves_litellm_and_openai_globals_alone(
        report: dict[str, Any]) -> None:
    assert _part(report, "globals")["plugin"] == []
    # The gateway's own settings and patches are still there, for its app to install.
    installed = _part(report, "install")
    assert {"litellm.DEFAULT_MAX_RETRIES", "litellm_logging.truncate_base64_in_messages_async",
            "OpenAIGPTConfig.async_transform_request", "chat_resource.async_maybe_transform",
            "completions_resource.async_maybe_transform"} <= set(installed["install"])
    assert installed["retries"] == 0


def test_a_thousand_unlisted_model_names_leave_the_plugins_state_flat(report: dict[str, Any]) -> None:
    """A process of its own (its allocations are the measure) that has imported LiteLLM sends 1,000
    requests through the plug-in: up to a minute under load."""
    found = _part(report, "state")
    assert found["compressed"]
    assert found["services"] == 1
    assert found["samples"][1] == found["samples"][0]
    # 900 requests: a service, a cache or labels per name would be megabytes; the call-id reports
    # (bounded at MAX_PENDING_REPORTS, one small dict each) are all that may grow.
    assert found["growth"] < 900 * 1024, found["growth"]
