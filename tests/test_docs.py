"""The configuration page cannot fall behind the code.

Every setting of the config model (``gateway/config.py``, walked field by field through its nested
models) must be named on ``docs/configuration.md`` by its full dotted key in backticks, e.g.
``mixpr_settings.prefix.reset_fill`` or ``model_list[].model_info.max_input_tokens``; every key the
page's tables name must be a setting; and every command-line option must be there too. The page's
prose is not checked, only that no setting is missing or stale. (`make test` also builds the whole
site with ``mkdocs build --strict``, which fails on a broken link.)
"""

from __future__ import annotations

import contextlib
import io
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from gateway.__main__ import parse_args
from gateway.config import GatewayConfig, MixprOverrides, MixprSettings, parse_config
from gateway.local import managed

PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
# Per-model overrides mirror mixpr_settings key for key (checked below), so the page documents each
# once, as mixpr_settings.<key>, and says that model_list[].mixpr takes any of them.
OVERRIDES = "model_list[].mixpr"
ROOTS = ("model_list", "mixpr_settings", "general_settings")


def nested(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The pydantic model inside a field's type (through Optional, unions, Annotated and lists),
    and whether it sits in a list (its key then reads ``name[]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = get_origin(annotation)
    if origin in (list, tuple, set, frozenset):
        found, _ = nested(get_args(annotation)[0]) if get_args(annotation) else (None, False)
        return found, found is not None
    if origin in (Union, types.UnionType, Annotated):
        for arg in get_args(annotation):
            found, listed = nested(arg)
            if found is not None:
                return found, listed
    return None, False


def settings(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field's dotted key, nested models' fields included (a list of models: ``name[].field``)."""
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        yield key
        inner, listed = nested(field.annotation)
        if inner is not None:
            yield from settings(inner, f"{key}[]." if listed else f"{key}.")


def documented_as(key: str) -> str:
    """The key the page names a setting by."""
    if key.startswith(OVERRIDES + "."):
        return "mixpr_settings." + key[len(OVERRIDES) + 1 :]
    return key


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def table_keys(text: str) -> set[str]:
    """The keys in the first column of the page's tables that name a setting."""
    return {m for m in re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE) if m.split(".")[0]
            .removesuffix("[]") in ROOTS}


ALL = sorted(set(settings(GatewayConfig)))


def test_the_walk_reaches_nested_models() -> None:
    # If the walk stopped at the first level, the test below would pass on an empty page.
    assert "mixpr_settings.prefix.reset_fill" in ALL
    assert "mixpr_settings.self_route.fallback_model" in ALL
    assert "model_list[].model_info.max_input_tokens" in ALL
    assert "model_list[].mixpr.self_route.enabled" in ALL
    assert "general_settings.max_body_objects" in ALL
    assert len(ALL) > 45


@pytest.mark.parametrize("key", ALL)
def test_every_setting_is_on_the_configuration_page(key: str) -> None:
    name = documented_as(key)
    assert f"`{name}`" in page(), (
        f"setting {key} is not documented: add a row for `{name}` to docs/configuration.md")


def test_the_page_names_no_setting_that_does_not_exist() -> None:
    known = {documented_as(key) for key in ALL}
    # managed_server is a free-form block checked by the model server's own code, not by pydantic.
    stale = {key for key in table_keys(page()) if key not in known
             and not key.startswith("model_list[].managed_server.")}
    assert not stale, f"docs/configuration.md documents settings the config model lacks: {sorted(stale)}"


def test_the_managed_server_keys_are_on_the_configuration_page() -> None:
    # managed_server is a free-form block (any other key is an llama.cpp option); these are the gateway's.
    rows = {key.rpartition(".")[2] for key in table_keys(page())
            if key.startswith("model_list[].managed_server.")}
    assert rows == set(managed._OWN_KEYS)


def _shape(model: type[BaseModel]) -> dict[str, object]:
    return {name: (_shape(inner) if (inner := nested(field.annotation)[0]) else None)
            for name, field in model.model_fields.items()}


def test_per_model_overrides_mirror_mixpr_settings() -> None:
    # What lets the page document each override once, as its mixpr_settings key.
    assert _shape(MixprOverrides) == _shape(MixprSettings)


def test_every_command_line_option_is_on_the_configuration_page() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    options = set(re.findall(r"(--[a-z][a-z-]+)", out.getvalue())) - {"--help"}
    assert "--config" in options and "--workers" in options
    missing = sorted(o for o in options if f"`{o}`" not in page())
    assert not missing, f"command-line options missing from docs/configuration.md: {missing}"


def test_the_readme_stays_a_page_and_its_links_resolve() -> None:
    root = PAGE.parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "make run" in readme and "make test" in readme
    targets = re.findall(r"\]\(((?!https?://)[^)#]+)", readme)
    assert targets
    missing = sorted(t for t in targets if not (root / t).exists())
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_endpoint_is_on_the_apis_page() -> None:
    from gateway.app import create_app  # imports LiteLLM: only this test pays for it

    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/m"}}]})
    app = create_app(config)
    endpoints = {f"{method.upper()} {path}" for path, operations in app.openapi()["paths"].items()
                 for method in operations}
    assert "POST /v1/chat/completions" in endpoints and "POST /v1/messages" in endpoints
    apis = (PAGE.parent / "apis.md").read_text(encoding="utf-8")
    missing = sorted(e for e in endpoints if f"`{e}`" not in apis)
    assert not missing, f"endpoints missing from docs/apis.md: {missing}"
