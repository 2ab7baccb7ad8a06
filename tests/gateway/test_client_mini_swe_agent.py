"""mini-swe-agent (PyPI ``mini-swe-agent``, a Python agent framework that calls its model through
LiteLLM) through the gateway's chat completions (issue 36), as a user runs it: the ``mini`` command,
its text-based loop (``mini_textbased.yaml``: one ```` ```mswea_bash_command ```` block per answer), the
gateway as an ``openai/<model>`` endpoint (``model.model_kwargs.api_base``), ``--yolo``.

The scripted upstream (``fake_bash_agent``) answers the loop's steps with real shell commands, which
mini-swe-agent runs in a throwaway folder: it writes a file, reads it back, computes, then submits. The
loop must end as submitted, the files must be there, and each step's real output must reach the next
request through the gateway, which answers no 4xx or 5xx.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agent_clients import Run, chat_model, gateway
from conftest import MASTER_KEY
from fake_bash_agent import FakeBashAgent

MODEL = "chat-32k"
TASK = "Write three names to notes.txt, find beta in it, and save six times seven to answer.txt."
COMMANDS = [
    "printf 'alpha\\nbeta\\ngamma\\n' > notes.txt && wc -l < notes.txt",
    "grep -n beta notes.txt",
    "echo $((6 * 7)) > answer.txt && cat answer.txt",
    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat answer.txt",
]
# What each command printed, as the next request must show it (mini-swe-agent's observation).
OUTPUTS = ["<output>\n3\n</output>", "<output>\n2:beta\n</output>", "<output>\n42\n</output>"]


def _mini(url: str, folder: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``mini`` with the gateway as its LiteLLM endpoint, its global config and trajectory in ``home``."""
    specs = ["mini_textbased.yaml", "model.model_class=litellm_textbased",
             f"model.model_kwargs.api_base={url}/v1", "model.cost_tracking=ignore_errors",
             f"environment.cwd={folder}", "agent.step_limit=10"]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "MSWEA_GLOBAL_CONFIG_DIR": str(home),
           "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1", "OPENAI_API_KEY": MASTER_KEY,
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-m", "minisweagent.run.mini", "--model", f"openai/{MODEL}", "--task", TASK,
               "--yolo", "--exit-immediately", "--output", str(home / "run.traj.json")]
    command += [arg for spec in specs for arg in ("--config", spec)]
    return subprocess.run(command, cwd=folder, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict, Path]:
    """One mini-swe-agent run: its record, its trajectory, and the folder its commands ran in."""
    folder, home = tmp_path_factory.mktemp("mini-work"), tmp_path_factory.mktemp("mini-home")
    upstream = FakeBashAgent(COMMANDS).start()
    try:
        with gateway(chat_model(MODEL, upstream.url), MASTER_KEY) as served:
            done = _mini(served.url, folder, home)
            run = Run(done, list(upstream.requests), served.metrics(), served.failures(), "lock")
    finally:
        upstream.stop()
    trajectory = json.loads((home / "run.traj.json").read_text()) if (home / "run.traj.json").exists() else {}
    return run, trajectory, folder


def test_mini_swe_agent_runs_its_loop_through_the_gateway(loop: tuple[Run, dict, Path]) -> None:
    run, trajectory, folder = loop
    run.ended_well()
    assert trajectory["info"]["exit_status"] == "Submitted", trajectory.get("info")
    assert trajectory["info"]["submission"] == "42\n"
    # The commands ran for real, in the throwaway folder.
    assert (folder / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"
    assert (folder / "answer.txt").read_text() == "42\n"
    # One request per step (the submitting step ends the loop without another), each carrying what
    # the commands before it printed, through the gateway.
    assert len(run.loop) == len(COMMANDS)
    for step, body in enumerate(run.loop):
        sent = "\n".join(str(m.get("content")) for m in body["messages"])
        assert TASK in sent
        assert all(output in sent for output in OUTPUTS[:step]), (step, sent[-1500:])
    assert {body["model"] for body in run.loop} == {"reader"}  # through the gateway's model entry
