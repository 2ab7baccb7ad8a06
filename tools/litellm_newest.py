"""The newest LiteLLM whose ``[proxy]`` extra installs from the registry, installed into a venv.

``make litellm-newest`` runs the plug-in and guardrail tests against LiteLLM's newest release, but a
release's ``[proxy]`` extra pins companion packages (``litellm-enterprise``, ``litellm-proxy-extras``,
``litellm-proxy``) at versions the registry may not have yet. ``uv`` would then fail, or quietly keep
an older LiteLLM. So each release newer than the locked one is tried, newest first, as a dry run;
every one that does not resolve is printed with the resolver's reason, and the first that does is
installed and named. Only this one package's releases are looked up.

    python tools/litellm_newest.py --python .venv-litellm-newest/bin/python --uv .venv/bin/uv
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

LOCK = Path(__file__).resolve().parents[1] / "requirements.lock"
CAUSE = re.compile(r"cause: (Because .*?)(?:, we can conclude|$)", re.S)


def locked() -> tuple[int, ...]:
    """The version of LiteLLM ``requirements.lock`` pins: never gone below."""
    found = re.search(r"^litellm==([\d.]+)", LOCK.read_text(), re.M)
    if found is None:
        sys.exit("requirements.lock pins no litellm")
    return _key(found.group(1))


def releases(python: str) -> list[str]:
    """LiteLLM's final releases on the registry, newest first (pip's own listing)."""
    done = subprocess.run([python, "-m", "pip", "index", "versions", "litellm"], capture_output=True,
                          text=True, timeout=300)
    listed = re.search(r"Available versions: (.*)", done.stdout)
    if listed is None:
        sys.exit(f"pip could not list litellm's releases:\n{done.stderr[-1000:]}")
    return sorted((v.strip() for v in listed.group(1).split(",")), key=_key, reverse=True)


def why_not(uv: str, python: str, version: str) -> str | None:
    """None when ``litellm[proxy]==version`` resolves; else the resolver's reason, in one line."""
    command = [uv, "pip", "install", "--dry-run", "--python", python, f"litellm[proxy]=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return None
    cause = CAUSE.search(done.stderr)
    return " ".join((cause.group(1) if cause else done.stderr.strip()[-300:]).split())


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the venv's interpreter")
    parser.add_argument("--uv", default="uv")
    args = parser.parse_args()
    floor = locked()
    for version in (v for v in releases(args.python) if _key(v) >= floor):
        reason = why_not(args.uv, args.python, version)
        if reason is None:
            subprocess.run([args.uv, "pip", "install", "--quiet", "--python", args.python,
                            f"litellm[proxy]=={version}"], check=True)
            print(f"litellm {version}: the newest release whose [proxy] extra resolves")
            return
        print(f"skipped litellm {version}: {reason}")
    sys.exit("no release at or above the locked one resolves")


if __name__ == "__main__":
    main()
