"""The package's halves: the mixpr library works with none of the gateway's packages (a clean-venv
install of the wheel is `make package`'s check, in CI); the gateway says which extra it needs."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GATEWAY_ONLY = ("fastapi", "litellm", "uvicorn", "yaml", "pydantic", "starlette", "aiohttp", "redis",
                "orjson", "prometheus_client", "langchain_core", "llama_index")  # fmt: skip
# Each of these modules fails to import in the child, as if it were not installed.
HIDE = f"import sys\nfor name in {GATEWAY_ONLY!r}:\n    sys.modules[name] = None\n"


def run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    return subprocess.run([sys.executable, "-c", HIDE + code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_library_needs_none_of_the_gateways_packages():
    done = run(
        "import mixpr\n"
        "text = ' '.join(f'Room {i} has a blue door.' for i in range(1500)) + ' The vault code is 4417.'\n"
        "result = mixpr.compress(text, query='What is the vault code?', budget_tokens=100)\n"
        "assert '4417' in result.text and result.stats['kept_tokens'] <= 100, result.stats\n"
        "print(len(result.text) < len(text))\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def test_the_gateway_without_its_extra_names_the_extra():
    done = run("import gateway\n")
    assert done.returncode != 0
    assert "pip install 'mixpr-gateway[gateway]'" in done.stderr
    assert "missing: fastapi, litellm" in done.stderr


def test_the_integrations_without_their_extras_name_them():
    for module, extra in (("langchain", "langchain"), ("llama_index", "llama-index")):
        done = run(f"import mixpr.integrations.{module}\n")
        assert f"pip install 'mixpr-gateway[{extra}]'" in done.stderr, done.stderr


def test_the_librarys_dependencies_are_its_own():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {req.split(">")[0].split("[")[0].lower() for req in project["dependencies"]}
    assert names == {"numpy", "scipy", "scikit-learn", "tiktoken"}
    for extra in ("local", "test"):
        assert any(req.startswith("mixpr-gateway[gateway") for req in project["optional-dependencies"][extra])
