"""What the end-to-end tests of real agent clients share (``test_client_*.py``): the clients from npm,
the gateway in front of a scripted upstream on a 32k-token model, and what every run must show.

Releases: the pinned version of each client in ``make test``; the newest (npm's ``latest`` tag) when
``MIXPR_CLIENTS=newest`` (``make clients``). Each release is installed once into a folder of its own
under the user's cache, ``~/.cache/mixpr-gateway/npm-clients/<home>-<version>`` (``$MIXPR_NPM_CLIENTS``
names another), as uv keeps its packages there: every later run, in this clone or a fresh one, reuses
it, where an install into the clone took each fresh clone 4 to 6 s of npm per client. ``<ENV>`` (e.g.
``CLAUDE_CODE_BIN``) names an executable to use instead of the pinned one. A test skips only when
node or npm is missing, or, for the newest release, when the registry cannot be reached; a failed
install fails it (with npm's output). Installs of different clients go to different folders, so test
files may run in parallel (``--dist loadfile``); npm's own cache is safe to share.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import codeword_task
import httpx
import pytest
from conftest import MASTER_KEY, ServerThread
from corpus import filler
from fake_chat_agent import FakeChatAgent

from gateway import create_app
from gateway.config import parse_config

# The clients' folders, one per release: 150 to 400 MB each, so delete old ones after a version bump.
_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
CLIENTS = Path(os.environ.get("MIXPR_NPM_CLIENTS") or _CACHE / "mixpr-gateway" / "npm-clients")
RELEASE_ENV = "MIXPR_CLIENTS"  # "newest": the newest release of every npm client instead of the pinned
FILES = 15
WINDOW = 32_768  # the test model's window: a small one, so the clients' loops overflow it
REGISTRY_TIMEOUT_S = 60
CLIENT_TIMEOUT_S = 900
_STATUS = re.compile(r'^mixpr_requests_total\{[^}]*status="(\d+)"[^}]*\} ([0-9.e+]+)$', re.M)


@dataclass(frozen=True)
class NpmClient:
    """An agent CLI from npm: its package, the version ``make test`` runs, its executable's name, the
    environment variable that names an executable instead, and the name of its folders (``CLIENTS``)."""

    package: str
    pinned: str
    binary: str
    env: str
    home: str

    def executable(self) -> Path:
        """The release this run tests (:func:`release`), installed once per run."""
        return _resolved(self, release())[0]

    def version(self) -> str:
        """The version :meth:`executable` runs (``$<ENV>`` when that names the executable)."""
        return _resolved(self, release())[1]


CLAUDE_CODE = NpmClient("@anthropic-ai/claude-code", "2.1.332", "claude", "CLAUDE_CODE_BIN", "claude-code")
CODEX = NpmClient("@openai/codex", "0.169.0", "codex", "CODEX_BIN", "codex")
OPENCODE = NpmClient("opencode-ai", "1.18.33", "opencode", "OPENCODE_BIN", "opencode")
QWEN_CODE = NpmClient("@qwen-code/qwen-code", "0.24.4", "qwen", "QWEN_CODE_BIN", "qwen-code")


def release() -> str:
    """``pinned`` (``make test``) or ``newest`` (``make clients``: ``MIXPR_CLIENTS=newest``)."""
    chosen = os.environ.get(RELEASE_ENV, "pinned")
    if chosen not in ("pinned", "newest"):
        raise ValueError(f"{RELEASE_ENV} must be pinned or newest, not {chosen!r}")
    return chosen


@functools.cache
def _resolved(client: NpmClient, chosen: str) -> tuple[Path, str]:
    given = os.environ.get(client.env) if chosen == "pinned" else None
    if given:
        return Path(given), f"${client.env}"
    version = client.pinned if chosen == "pinned" else newest(client.package)
    return installed(client.package, version, client.binary, home=client.home), version


def installed(package: str, version: str, binary: str, *, home: str) -> Path:
    """The executable ``binary`` of ``package@version`` in ``CLIENTS/<home>-<version>``, installed when
    missing."""
    _need_npm(package)
    prefix = CLIENTS / f"{home}-{version}"
    manifest = prefix / "node_modules" / package / "package.json"
    path = prefix / "node_modules" / ".bin" / binary
    with _locked(prefix):  # two installs into one folder at once (xdist workers, two runs) break both
        if not manifest.exists() or json.loads(manifest.read_text())["version"] != version:
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                                   f"{package}@{version}"], capture_output=True, text=True, timeout=600)
            if done.returncode:
                pytest.fail(f"npm install {package}@{version} failed:\n{done.stderr[-2000:]}")
        script = manifest.parent / "install.cjs"
        # Claude Code's native binary is put in place by its install script, which npm may not run.
        if script.exists() and path.resolve().stat().st_size < 1_000_000:
            subprocess.run(["node", str(script)], check=True, capture_output=True, timeout=120)
    return path


@contextlib.contextmanager
def _locked(prefix: Path) -> Iterator[None]:
    """``prefix``'s install lock, held until the block ends (released by the OS if the process dies)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def newest(package: str) -> str:
    """The version npm's ``latest`` tag names now; skips the test when the registry cannot be reached."""
    _need_npm(package)
    try:
        done = subprocess.run(["npm", "view", package, "version"], capture_output=True, text=True,
                              timeout=REGISTRY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the npm registry did not answer in {REGISTRY_TIMEOUT_S} s: newest {package} unknown")
    if done.returncode or not done.stdout.strip():
        pytest.skip(f"the npm registry could not be reached: newest {package} unknown ({done.stderr[-300:]})")
    return done.stdout.strip()


def _need_npm(package: str) -> None:
    if not (shutil.which("node") and shutil.which("npm")):
        pytest.skip(f"node/npm not found: {package} cannot be installed (or name an executable in its _BIN)")


# -- the gateway in front of a scripted upstream -----------------------------------------------------


class Gateway:
    """A gateway on 127.0.0.1 (``url``) whose one model is ``entry``."""

    def __init__(self, entry: dict[str, Any], master_key: str | None) -> None:
        general: dict[str, Any] = {"compression_workers": 1}
        if master_key:
            general["master_key"] = master_key
        config = {"model_list": [entry], "mixpr_settings": {"router": "heuristic"},
                  "general_settings": general}
        self.server = ServerThread(create_app(parse_config(config))).start()
        self.url = self.server.url

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics").text

    def failures(self) -> dict[str, float]:
        """The gateway's 4xx and 5xx answers so far, by status (``mixpr_requests_total``)."""
        counts: dict[str, float] = {}
        for status, count in _STATUS.findall(self.metrics()):
            if int(status) >= 400 and float(count):
                counts[status] = counts.get(status, 0) + float(count)
        return counts


@contextmanager
def gateway(entry: dict[str, Any], master_key: str | None = None) -> Iterator[Gateway]:
    served = Gateway(entry, master_key)
    try:
        yield served
    finally:
        served.server.stop()


def chat_model(name: str, api_base: str) -> dict[str, Any]:
    """A 32k-window model served by an OpenAI-compatible upstream at ``api_base``."""
    return {"model_name": name, "model_info": {"max_input_tokens": WINDOW},
            "litellm_params": {"model": "openai/reader", "api_base": api_base, "api_key": "sk-upstream"}}


def codex_exec(model: str, prompt: str, url: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``codex exec prompt`` with the gateway at ``url`` as its model provider (``wire_api =
    "responses"``), as a user configures it, on ``model``."""
    codex_home = home / "codex-home"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "mixpr"\n[model_providers.mixpr]\nname = "mixpr"\n'
        f'base_url = "{url}/v1"\nenv_key = "MIXPR_KEY"\nwire_api = "responses"\n')
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "CODEX_HOME": str(codex_home),
           "MIXPR_KEY": MASTER_KEY}
    return subprocess.run([str(CODEX.executable()), "exec", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", prompt],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)


# -- the tasks and what every run must show ----------------------------------------------------------


@dataclass
class Run:
    """One client run through the gateway: the process, the upstream's loop requests (each a body, as
    parsed JSON), the gateway's metrics text and its 4xx/5xx answers by status."""

    done: subprocess.CompletedProcess[str]
    loop: list[dict[str, Any]]
    metrics: str
    failures: dict[str, float]
    version: str = "?"

    def ended_well(self) -> None:
        """Exit 0, and no request the gateway answered with a 4xx or a 5xx."""
        assert self.done.returncode == 0, (self.version, self.done.stdout[-2000:], self.done.stderr[-2000:])
        assert not self.failures, f"the gateway answered {self.failures} (status: count)"


def chat_task(files: list[str], model: str, run: Callable[[str], subprocess.CompletedProcess[str]],
              master_key: str | None = None) -> Run:
    """``run(gateway_url)`` with the gateway in front of the scripted chat upstream that reads ``files``
    through the client's shell tool (``fake_chat_agent``), on a 32k model named ``model``."""
    upstream = FakeChatAgent(files).start()
    try:
        with gateway(chat_model(model, upstream.url), master_key) as served:
            done = run(served.url)
            return Run(done, upstream.loop_requests(), served.metrics(), served.failures())
    finally:
        upstream.stop()


def codeword_run(factory: pytest.TempPathFactory, client: NpmClient, model: str,
                 run: Callable[[str, str, Path, Path], subprocess.CompletedProcess[str]]) -> Run:
    """Issue 28's 15-file task with ``client`` on a 32k model named ``model`` (``chat_task``), in a
    folder and a home of its own: ``run(task, gateway_url, folder, home)`` runs the client."""
    folder = factory.mktemp(f"{client.home}-task")
    files = codeword_task.write(folder)
    home = factory.mktemp(f"{client.home}-home")
    done = chat_task(files, model, lambda url: run(codeword_task.TASK, url, folder, home), MASTER_KEY)
    done.version = client.version()
    return done


def assert_run_kept_codeword(run: Run) -> None:
    """``assert_codeword_kept`` on a chat client's run: its last loop request and its final answer."""
    assert_codeword_kept(json.dumps(run.loop[-1]["messages"]), run.done.stdout, codeword_trail(run))


def assert_codeword_kept(sent: str, stdout: str, trail: str = "") -> None:
    """Issue 28's check: the codeword of the file the task names is in the last request (``sent``), and
    so in the client's final answer (the scripted upstream lists every codeword it can see). ``trail``
    (``codeword_trail``) says, on a failure, where along the loop it went."""
    asked = codeword_task.codeword(codeword_task.ASKED)
    kept = ", ".join(f"f{n}" for n in range(FILES) if codeword_task.codeword(n) in sent) or "none"
    lost = f"f{codeword_task.ASKED}.txt's codeword is not in the last request; kept: {kept}"
    assert asked in sent, lost + trail
    assert asked in stdout


_TRAIL_METRICS = re.compile(r"^mixpr_(?:chat_requests|resets|compression_failures|message_forms|prefix_turns)"
                            r"_total\{.*$", re.M)


def codeword_trail(run: Run) -> str:
    """Each loop request's size and whether it held the asked codeword, and the gateway's counters of
    actions, resets and failures: what a rare failure needs to be read (Qwen Code's failed once in ~60)."""
    asked = codeword_task.codeword(codeword_task.ASKED)
    steps = [f"{k}:{len(json.dumps(body['messages']))}{'+' if asked in json.dumps(body['messages']) else '-'}"
             for k, body in enumerate(run.loop)]
    return "\nrequests (chars, asked codeword +/-): " + " ".join(steps) + "\n" + "\n".join(
        _TRAIL_METRICS.findall(run.metrics))


def assert_every_chat_call_answered(messages: list[dict[str, Any]], call_id: str) -> None:
    """All 15 calls (ids ``<call_id><n>``) and their tool results reach the request, in order."""
    ids = [f"{call_id}{n}" for n in range(FILES)]
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert calls == ids
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ids


def write_project(folder: Path, files: int) -> list[str]:
    """``files`` text files of about 3,000 tokens each, a code on each one's first line: what the
    agent CLIs are asked to read one by one."""
    paths = []
    for n in range(files):
        path = folder / "project" / f"notes_{n:02d}.txt"
        path.parent.mkdir(exist_ok=True)
        lines = [f"CODE-{n}-{'abcdefghijklmnopqrstuvwxyz'[n]}x"]
        lines += [filler(8, seed=100 * n + k) for k in range(16)]
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths
