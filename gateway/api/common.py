"""What every API shares at the HTTP edge: the app's state, auth, the JSON body, mixpr switches."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from fastapi import Request
from starlette.responses import StreamingResponse

from gateway.compress.policy import AUTO, Control
from gateway.edge.body import read_json
from gateway.errors import BadRequest, Unauthorized
from gateway.run import offload
from mixpr import ROUTES

T = TypeVar("T")
CONTROL_KEYS = ("enabled", "route", "budget_tokens")
MIN_BUDGET = 16
_DIGITS = re.compile("[0-9]{1,18}")
# Proxies must neither cache nor buffer a stream of server-sent events.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def state(request: Request) -> Any:
    """The ``GatewayState`` the app was built with."""
    return request.app.state.gateway


def authorize(request: Request) -> None:
    """Bearer (or ``api-key``, or Anthropic's ``x-api-key``) must equal ``master_key`` when one is set."""
    key = state(request).config.general_settings.master_key
    if not key:
        return
    header = request.headers.get("authorization", "")
    given = header[7:].strip() if header[:7].lower() == "bearer " else (
        request.headers.get("api-key") or request.headers.get("x-api-key", ""))
    if not given:
        raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise Unauthorized("Incorrect API key provided.")


async def authorized_body(request: Request) -> tuple[Any, Any]:
    """Every API's first step: the app's state, the key checked, the JSON body read within limits."""
    gateway = state(request)
    authorize(request)
    return gateway, await read_json(request, gateway.config.general_settings)


async def parsed(parse: Callable[[Any, Any], T], body: Any, headers: Mapping[str, str]) -> T:
    """``parse(body, headers)``, the API's validation and translation of the request: per-part work,
    so done in a worker thread for a body of many messages or parts (``gateway.run.offload``)."""
    return await offload.inline_or_run(offload.is_big(body), parse, body, headers)


def parse_control(field: Any, headers: Mapping[str, str]) -> Control:
    """Per-request switches: the ``mixpr`` body field, else the ``x-mixpr-*`` headers."""
    raw: dict[str, Any] = {}
    for key in CONTROL_KEYS:
        header = headers.get("x-mixpr-" + key.replace("_", "-"))
        if header is not None:
            raw[key] = _from_header(key, header)
    if field is not None:
        if not isinstance(field, dict):
            raise BadRequest("'mixpr' must be an object.", param="mixpr")
        unknown = sorted(set(field) - set(CONTROL_KEYS))
        if unknown:
            valid = ", ".join(CONTROL_KEYS)
            raise BadRequest(f"Unknown mixpr option(s): {', '.join(unknown)}; valid: {valid}.",
                             param=f"mixpr.{unknown[0]}")
        raw.update(field)
    return _checked_control(raw)


def _from_header(key: str, value: str) -> Any:
    text = value.strip().lower()
    if key == "enabled":
        return {"true": True, "1": True, "false": False, "0": False}.get(text, value)
    if key == "budget_tokens":
        # ASCII digits only ("²".isdigit() is true, int() refuses it), and few enough for int().
        return int(text) if _DIGITS.fullmatch(text) else text if text == AUTO else value
    return text


def _checked_control(raw: dict[str, Any]) -> Control:
    enabled, route, budget = raw.get("enabled"), raw.get("route"), raw.get("budget_tokens")
    if enabled is not None and not isinstance(enabled, bool):
        raise BadRequest("mixpr.enabled must be true or false.", param="mixpr.enabled")
    if route is not None and route not in ROUTES:
        raise BadRequest(f"mixpr.route must be one of {', '.join(ROUTES)}.", param="mixpr.route")
    if budget is not None and budget != AUTO and not is_int_at_least(budget, MIN_BUDGET):
        raise BadRequest(f"mixpr.budget_tokens must be \"auto\" or an integer >= {MIN_BUDGET}.",
                         param="mixpr.budget_tokens")
    return Control(enabled=enabled, route=route, budget_tokens=budget)


def is_int_at_least(value: Any, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def event_stream(body: Any, headers: Mapping[str, str]) -> StreamingResponse:
    """A server-sent-event response of ``body`` (an async iterator of encoded events)."""
    return StreamingResponse(body, media_type="text/event-stream", headers={**headers, **SSE_HEADERS})
