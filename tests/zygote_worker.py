"""The interpreter of `make test`'s pytest-xdist workers: ``python tests/zygote_worker.py -u -c <code>``
in place of ``python -u -c <code>`` (``--tx popen//python=...``, set by ``tests/zygote.py``).

A worker is forked by the run's gateway zygote, which has imported the gateway (LiteLLM and the
openai SDK with it) and loaded MixPR's tables: each new interpreter spent about 8 CPU-seconds on them
before it collected a test, and three did at once, beside the zygote (issue 59). This process hands
its stdin, stdout and stderr (execnet's pipes), environment and folder to the zygote, which forks the
worker with them; it then stands in for the worker, as the process execnet started: it passes on the
signals it gets and exits with the worker's code.
"""

from __future__ import annotations

import os
import select
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zygote import ENV, ask  # noqa: E402  (this checkout's, found through the line above)


def main(argv: list[str]) -> int:
    flags, code = argv[:argv.index("-c")], argv[argv.index("-c") + 1]
    zygote = os.environ[ENV]
    request = {"op": "worker", "code": code, "argv": argv[argv.index("-c") + 2:], "cwd": os.getcwd(),
               "env": dict(os.environ), "dont_write_bytecode": "-B" in flags}
    pid = ask(zygote, request, [0, 1, 2])["pid"]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, frame: os.kill(pid, number))
    exited = os.pidfd_open(pid)  # readable once the worker has exited (it is the zygote's child)
    select.select([exited], [], [])
    returncode: int = ask(zygote, {"op": "poll", "pid": pid})["returncode"]
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
