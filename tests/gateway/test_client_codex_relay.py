"""The real Codex CLI through the gateway's Responses relay (issue 48): a model whose upstream serves
the Responses API itself (``model_info.responses_api``), scripted as OpenAI would answer
(``fake_responses_agent``), with a 32k-token window that the 15 files Codex reads overflow.

Codex keeps what the upstream's answers carried (a ``compaction`` item, reasoning items with
``encrypted_content``) and sends it back on every turn: each must reach the upstream exactly as the
upstream sent it, while the long file outputs are compressed to fit. The release (pinned, or newest
with ``make clients``) and its install: ``agent_clients``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from agent_clients import CLIENT_TIMEOUT_S, CODEX, FILES, WINDOW, codex_exec, gateway, write_project
from conftest import MASTER_KEY
from fake_chat_agent import CALL_ID, FINAL
from fake_responses_agent import COMPACTION, REMOTE_COMPACTION, FakeResponsesAgent, reasoning

MODEL = "relay-32k"
TASK = "Read each of the files the project holds and report the code written at the top of each."


def _entry(api_base: str) -> dict[str, Any]:
    return {"model_name": MODEL, "model_info": {"max_input_tokens": WINDOW, "responses_api": True},
            "litellm_params": {"model": "openai/reader", "api_base": api_base, "api_key": "sk-upstream"}}


def _canonical(item: dict[str, Any]) -> str:
    """An item as JSON with sorted keys, no ``id`` and no null field (Codex sends back an output item's
    fields, not its id, and writes ``"content": null`` for a reasoning item without content)."""
    return json.dumps({k: v for k, v in item.items() if k != "id" and v is not None}, sort_keys=True)


def test_codex_through_the_relay_keeps_opaque_items_whole(tmp_path: Path) -> None:
    project = write_project(tmp_path, FILES)
    upstream = FakeResponsesAgent(project).start()
    try:
        with gateway(_entry(upstream.url), MASTER_KEY) as served:
            done = codex_exec(MODEL, TASK, served.url, Path(project[0]).parent, tmp_path)
            metrics, failures = served.metrics(), served.failures()
    finally:
        upstream.stop()
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert not failures and FINAL in done.stdout
    loop = upstream.loop_requests()
    assert len(loop) == FILES + 1
    last = loop[-1]["input"]
    calls = [i["call_id"] for i in last if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in last if i.get("type") == "function_call_output"]
    assert calls == outputs == [f"{CALL_ID}{n}" for n in range(FILES)]
    kept = [_canonical(i) for i in last if i.get("type") in ("compaction", "reasoning")]
    print("codex sent back:", sorted({i.get("type") for i in last}), "opaque items:", len(kept))
    # What Codex sends back of the opaque items reaches the upstream with every field it made.
    made = {_canonical(COMPACTION), *(_canonical(reasoning(n)) for n in range(FILES + 1))}
    assert kept and all(item in made for item in kept), kept[:3]
    sizes = sum(Path(p).stat().st_size for p in project)
    results = sum(len(json.dumps(i["output"])) for i in last if i.get("type") == "function_call_output")
    assert sizes / 4 > WINDOW and results < 0.8 * sizes
    assert 'action="compressed"' in metrics


def _openai_exec(url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``codex exec`` on its built-in OpenAI provider pointed at the gateway (``openai_base_url``):
    the provider Codex compacts remotely with, once a turn's usage passes its limit."""
    codex_home = home / "codex-home"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(f'model = "{MODEL}"\nmodel_auto_compact_token_limit = 20000\n'
                                            f'openai_base_url = "{url}/v1"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(codex_home),
           "OPENAI_API_KEY": MASTER_KEY, "CODEX_API_KEY": MASTER_KEY}
    return subprocess.run([str(CODEX.executable()), "exec", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", TASK],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


def test_codex_compacts_remotely_through_the_relay(tmp_path: Path) -> None:
    """The upstream's first answer reports 50k tokens, past Codex's limit: Codex compacts remotely, a
    Responses request ending in a ``compaction_trigger`` item (with the earlier ``compaction`` item,
    encrypted reasoning and its ``client_metadata``), which must reach the upstream whole; then it
    sends the ``compaction`` item it got back on, whole, and finishes the task."""
    project = write_project(tmp_path, 3)
    upstream = FakeResponsesAgent(project, first_usage=50_000).start()
    try:
        with gateway(_entry(upstream.url), MASTER_KEY) as served:
            done = _openai_exec(served.url, Path(project[0]).parent, tmp_path)
            failures = served.failures()
    finally:
        upstream.stop()
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    assert not failures and FINAL in done.stdout
    [compacting] = upstream.compactions
    assert compacting["input"][-1]["type"] == "compaction_trigger"
    assert _sealed(compacting) >= {COMPACTION["encrypted_content"], reasoning(0)["encrypted_content"]}
    assert isinstance(compacting.get("client_metadata"), dict)  # a field LiteLLM's translation drops
    after = upstream.requests[upstream.requests.index(compacting) + 1:]
    assert after and all(REMOTE_COMPACTION["encrypted_content"] in _sealed(r) for r in after)


def _sealed(request: dict[str, Any]) -> set[str]:
    """The ``encrypted_content`` of every item of ``request`` that has one, as the upstream got it."""
    return {i["encrypted_content"] for i in request["input"] if isinstance(i.get("encrypted_content"), str)}
