"""Loading the plug-in changes nothing in its host: LiteLLM's and the openai SDK's globals stay as they were.

A fresh interpreter loads what a LiteLLM proxy has loaded (its proxy server module), records every
global of LiteLLM, the openai SDK and the classes and modules the gateway's app patches (by identity,
so a rebound function or a replaced setting shows), then imports the plug-in, builds it and runs a
request through it, and records again. The gateway's own ``install()`` run afterwards must change
them: the check sees what it is meant to see.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import asyncio, json, sys
import litellm, openai
import litellm.proxy.proxy_server  # what the host has loaded before it reads its guardrails
import litellm.litellm_core_utils.litellm_logging as litellm_logging
import openai.resources.chat.completions.completions as chat_resource
import openai.resources.completions as completions_resource
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig

WATCHED = {"litellm": vars(litellm), "openai": vars(openai), "litellm_logging": vars(litellm_logging),
           "chat_resource": vars(chat_resource), "completions_resource": vars(completions_resource),
           "OpenAIGPTConfig": OpenAIGPTConfig.__dict__}

def snapshot():  # identities only: repr() would load the openai module's lazy client proxies
    return {f"{where}.{name}": id(value)
            for where, names in WATCHED.items() for name, value in list(names.items())}

def changed(before, after):
    return sorted(k for k, v in before.items() if k in after and after[k] != v)

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
after_plugin = snapshot()
from gateway.upstream import patches
patches.install()
after_install = snapshot()
print(json.dumps({"plugin": changed(before, after_plugin), "install": changed(after_plugin, after_install),
                  "retries": litellm.DEFAULT_MAX_RETRIES}))
"""


def test_importing_and_using_the_plugin_leaves_litellm_and_openai_globals_alone() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["plugin"] == []
    # The gateway's own settings and patches are still there, for its app to install.
    assert {"litellm.DEFAULT_MAX_RETRIES", "litellm_logging.truncate_base64_in_messages_async",
            "OpenAIGPTConfig.async_transform_request", "chat_resource.async_maybe_transform",
            "completions_resource.async_maybe_transform"} <= set(found["install"])
    assert found["retries"] == 0
