"""Children outlive no parent, even one that died before they could ask to die with it.

``prctl(PR_SET_PDEATHSIG)`` only covers a parent that dies *after* the call. Each test starts a
parent process that starts a child and exits at once; only then does the child (held on a file
until the parent is gone) tie itself to its parent, as a compression worker and the managed model
server do when they start. It must end there, not carry on as an orphan.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SERVER_SCRIPT = str(ROOT / "gateway" / "local" / "xllamacpp_server.py")
LOADERS = {
    # the compression worker's start (gateway.run.workers._started)
    "worker": "from gateway.run.workers import die_with_parent",
    # the managed model server's start, loaded by path as the gateway runs it
    "model server": (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('srv', {SERVER_SCRIPT!r})\n"
        "srv = importlib.util.module_from_spec(spec); spec.loader.exec_module(srv)\n"
        "die_with_parent = srv.die_with_parent"
    ),
}

CHILD = """
import os, sys, time
{loader}
parent, go, survived = int(sys.argv[1]), sys.argv[2], sys.argv[3]
open(go + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
die_with_parent(parent)
open(survived, "w").write(str(os.getpid()))
time.sleep(30)
"""

PARENT = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2], sys.argv[3]],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
os._exit(0)  # gone before the child asks to die with it
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("child", sorted(LOADERS))
def test_a_child_whose_parent_died_while_it_started_exits(tmp_path: Path, child: str) -> None:
    go, survived = tmp_path / "go", tmp_path / "survived"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.run([sys.executable, "-c", PARENT, CHILD.format(loader=LOADERS[child]), str(go),
                             str(survived)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    pid = int(parent.stdout.split()[0])
    try:
        assert parent.returncode == 0, parent.stderr
        deadline = time.monotonic() + 60
        while not Path(f"{go}.ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"{go}.ready").exists(), f"the {child} did not start"
        go.touch()  # the parent has exited: the child now sets PR_SET_PDEATHSIG, too late
        deadline = time.monotonic() + 30
        while _alive(pid) and not survived.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not survived.exists(), f"the {child} carried on after its parent died"
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, 9)
