"""``/ui`` (login form, then the page), ``/ui/login``, ``/ui/logout``, ``/ui/page.css`` and ``/stats``.

With a master key, the page and its JSON need a login cookie (signed, expiring, HttpOnly,
SameSite=Strict) or, for ``/stats``, the key itself as for the API. Without one, they are served on
a loopback-bound gateway only (as the API is), never on another address. Reads run in threads,
after the stats queue is written, so the page shows every request answered before it and no read
ever runs on the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import redis
from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from gateway.api.common import authorize, state
from gateway.errors import BadRequest, PayloadTooLarge, ServiceUnavailable, Unauthorized, UnsupportedMediaType
from gateway.stats import figures
from gateway.ui import page, session

router = APIRouter(include_in_schema=False)
LOGIN_BODY_BYTES = 4096  # a form with one key: anything longer is not a login
FORM = "application/x-www-form-urlencoded"
# Nothing loads from elsewhere, nothing frames the page, forms post only to the gateway.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
CSS = resources.files("gateway.ui").joinpath("page.css").read_bytes()


def html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _open(request: Request) -> bool:
    """No key to log in with: served as the API is, on loopback only (``gateway.edge.exposure``)."""
    gateway = state(request)
    if gateway.config.general_settings.master_key:
        return False
    if not gateway.loopback_only:
        raise Unauthorized("The operator's page needs general_settings.master_key on a non-loopback "
                           "address.", status_code=403, error_type="permission_error", code="forbidden")
    return True


def logged_in(request: Request) -> bool:
    key = state(request).config.general_settings.master_key
    return _open(request) or (key is not None and session.valid(key, request.cookies.get(session.COOKIE)))


def window(request: Request) -> str:
    chosen = request.query_params.get("window", "all")
    if chosen not in figures.WINDOWS:
        raise BadRequest(f"window must be one of {', '.join(figures.WINDOWS)}, not {chosen[:20]!r}.",
                         param="window")
    return chosen


async def read(request: Request, chosen: str) -> dict[str, Any]:
    stats = state(request).stats
    if stats is None:
        raise ServiceUnavailable("The gateway is still starting; its stats are not open yet.", retry_after=1)
    await asyncio.to_thread(stats.recorder.flush)
    try:
        return await asyncio.to_thread(figures.read, stats.store, chosen)
    except (OSError, sqlite3.Error, redis.RedisError) as exc:  # the store, not the request, is at fault
        raise ServiceUnavailable(f"The stats store cannot be read right now ({type(exc).__name__}); "
                                 "requests are served as usual.", retry_after=5) from exc


@router.get("/ui", response_model=None)
async def ui(request: Request) -> Response:
    if not logged_in(request):  # a redirect, not a 401 page: a browser logs every 4xx as an error
        return RedirectResponse("/ui/login", status_code=303, headers={"cache-control": "no-store"})
    return html(page.stats_page(await read(request, window(request))))


@router.get("/ui/login")
async def login_form() -> HTMLResponse:
    """The form alone: no figure is read or shown before the login."""
    return html(page.login_page())


@router.get("/ui/page.css")
async def css() -> Response:
    return Response(CSS, media_type="text/css", headers={"cache-control": "max-age=3600"})


@router.post("/ui/login")
async def login(request: Request) -> Response:
    key = state(request).config.general_settings.master_key
    if _open(request) or key is None:
        return RedirectResponse("/ui", status_code=303)
    given = await _form_key(request)
    if not session.key_matches(key, given):
        return html(page.login_page("That is not the master key."), 401)
    response = RedirectResponse("/ui", status_code=303, headers={"cache-control": "no-store"})
    lifetime = state(request).config.general_settings.ui_session_s
    response.set_cookie(session.COOKIE, session.issue(key, lifetime), max_age=lifetime, path="/",
                        httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/ui/logout")
async def logout() -> Response:
    response = RedirectResponse("/ui", status_code=303)
    response.delete_cookie(session.COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def _form_key(request: Request) -> str:
    if request.headers.get("content-type", "").split(";")[0].strip() != FORM:
        raise UnsupportedMediaType(f"The login form is sent as {FORM}.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > LOGIN_BODY_BYTES:
            raise PayloadTooLarge(f"A login form is at most {LOGIN_BODY_BYTES} bytes.")
    try:
        values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4).get("key", [""])
    except ValueError as exc:  # more fields than a login has
        raise BadRequest("The login form has one field, key.") from exc
    return values[0]


@router.get("/stats")
async def stats(request: Request) -> JSONResponse:
    """The page's figures as JSON: with the login cookie, or the master key as for the API."""
    if not logged_in(request):
        authorize(request)
    return JSONResponse(await read(request, window(request)), headers={"cache-control": "no-store"})
