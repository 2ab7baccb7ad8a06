"""The plug-in's state is bounded by the proxy's ``model_list``, not by what clients send.

A fresh process holds what a LiteLLM proxy holds when it calls the plug-in: LiteLLM's real
``Router`` as ``proxy_server.llm_router``, with one model group. 1,000 long requests, each naming a
model the proxy does not list, go through ``apply_guardrail``; they pass through untouched, and
the plug-in's memory (``tracemalloc``, from the 100th request to the 1,000th, modules imported on
the way aside), its services and its metric samples stay flat. A listed model is still compressed,
with one set of labels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import asyncio, gc, json, tracemalloc
import litellm
from litellm.proxy import proxy_server
from gateway.plugins.litellm_guardrail import MixPRGuardrail

proxy_server.llm_router = litellm.Router(model_list=[{
    "model_name": "small", "model_info": {"max_input_tokens": 3000},
    "litellm_params": {"model": "openai/small", "api_base": "http://127.0.0.1:9", "api_key": "sk-x"}}])
LONG = " ".join(f"Sentence {i} says the falcon flew over hill {i}." for i in range(2500))

# A module LiteLLM imports lazily along the way is a one-off, not state kept per request.
NOT_IMPORTS = [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]

def allocated():
    gc.collect()
    return sum(s.size for s in tracemalloc.take_snapshot().filter_traces(NOT_IMPORTS).statistics("filename"))

def samples(guard):
    return sum(len(metric.samples) for metric in guard.metrics.registry.collect())

async def main():
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
    print(json.dumps({"compressed": compressed, "services": len(guard._services),
                      "samples": [base_samples, samples(guard)], "growth": at_1000 - at_100}))
    guard._compressor.close()

asyncio.run(main())
"""


def test_a_thousand_unlisted_model_names_leave_the_plugins_state_flat() -> None:
    """A fresh process (its allocations are the measure) that imports LiteLLM and sends 1,000 requests
    through the plug-in: up to a minute under load."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["compressed"]
    assert found["services"] == 1
    assert found["samples"][1] == found["samples"][0]
    # 900 requests: a service, a cache or labels per name would be megabytes; the call-id reports
    # (bounded at MAX_PENDING_REPORTS, one small dict each) are all that may grow.
    assert found["growth"] < 900 * 1024, found["growth"]
