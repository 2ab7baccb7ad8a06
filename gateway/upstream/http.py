"""The raw relays' one way out over HTTP: how upstreams are reached, whole server-sent events, and
what an upstream's status means for the client.

As httpx keeps its ``_config`` apart from its ``_transports``: :class:`Policy` is read once from the
environment, the way LiteLLM reads it (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` unless
``NO_PROXY`` names the host; ``SSL_VERIFY``, ``SSL_CERT_FILE``, else certifi's bundle), so a model is
reached the same way whether its request is relayed or goes through LiteLLM; :class:`Client` is the
one bounded, pooled aiohttp session both relays (``chat_relay``, ``relay``) share. aiohttp rather than
httpx: httpx's pool walks every connection for every request, which held a relay at c=32 to fewer
requests per second than at c=4 (measured, bench/README.md).
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio
import httpx
import litellm
import openai
import orjson
from litellm.litellm_core_utils.exception_mapping_utils import ExceptionCheckers
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

from gateway.errors import GatewayError
from gateway.upstream.forward import map_error

log = logging.getLogger("gateway.upstream.http")

KEEPALIVE_S = 30.0  # idle upstream connections are kept this long
ERROR_BODY_BYTES = 1 << 20  # an error answer is read up to this much
EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
# A JSON key "model" and its string value. Inside a JSON string a quote is escaped, so text that
# merely mentions "model" (an answer, tool arguments) never matches.
MODEL_FIELD = re.compile(rb'("model"\s*:\s*)"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True)
class Policy:
    """How upstreams are reached: pool bound, keep-alive, TLS verification (proxies: :func:`proxy_for`)."""

    max_connections: int
    verify: ssl.SSLContext | bool
    keepalive_s: float = KEEPALIVE_S

    @classmethod
    def from_env(cls, *, max_connections: int) -> Policy:
        # LiteLLM's own reading of SSL_VERIFY and SSL_CERT_FILE (certifi's bundle when neither is set).
        verify = get_ssl_configuration()
        return cls(max_connections, verify if isinstance(verify, ssl.SSLContext) else bool(verify))


def proxy_for(scheme: str, host: str) -> str | None:
    """The forward proxy for ``scheme://host``: LiteLLM's aiohttp transport reads the environment so."""
    if urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    return proxy if not proxy or "://" in proxy else f"http://{proxy}"


def phases(seconds: float) -> aiohttp.ClientTimeout:
    """The openai SDK's timeout: per phase (connect, each read), not for the whole call."""
    return aiohttp.ClientTimeout(total=None, connect=seconds, sock_connect=seconds, sock_read=seconds)


class Client:
    """The pooled session of one app; made on first use, on the loop that serves requests."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str], str | None] = {}  # read once per host, as LiteLLM does

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.policy.max_connections, ssl=self.policy.verify,
                                             keepalive_timeout=self.policy.keepalive_s)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, url: str, data: bytes, headers: Mapping[str, str],
                   timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        """The upstream's response, its body unread (read it, or hand it to :class:`Events`)."""
        try:
            return await self.session.post(url, data=data, headers=headers, timeout=timeout,
                                           allow_redirects=False, proxy=self._proxy(url))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc

    def _proxy(self, url: str) -> str | None:
        scheme, _, rest = url.partition("://")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        key = (scheme, host.rsplit(":", 1)[0] if not host.endswith("]") else host)
        if key not in self._proxies:
            self._proxies[key] = proxy_for(*key)
        return self._proxies[key]


async def read(response: aiohttp.ClientResponse, limit: int = -1) -> bytes:
    """The whole body (or its first ``limit`` bytes); the response is released or closed either way."""
    try:
        return await (response.read() if limit < 0 else response.content.read(limit))
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise transport_error(exc) from exc
    finally:
        if limit < 0:
            response.release()
        else:  # the rest is never read: the connection cannot be reused
            response.close()


class Events:
    """``stream_events``: an upstream's server-sent events, whole events per item (each ends at a
    blank line), so an error event added after a failure never lands inside a half-sent one.

    The response is closed on every exit: released to the pool when read to its end; closed (so the
    upstream stops generating, and billing) when the stream fails, is cut short (the client left,
    which cancels the reader) or was never read at all (:meth:`aclose`, which the HTTP response
    calls however it ends). A failure midway raises the mapped ``GatewayError``. Subclasses edit
    each block (:meth:`edit`), add a tail at a clean end (:meth:`tail`) and note the end (:meth:`closed`).
    """

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._reader = self._read()
        self._done = False
        self.ended = False  # the upstream's stream was read to its end

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._reader

    async def aclose(self) -> None:
        await self._reader.aclose()
        self._close()

    def edit(self, block: bytes) -> bytes:
        return block

    def tail(self) -> bytes:
        return b""

    def closed(self) -> None:
        """Called once, when the response is released or closed."""

    async def _read(self) -> AsyncIterator[bytes]:
        pending = b""
        try:
            async for data in self._response.content.iter_any():
                pending += data
                cut = boundary(pending)
                if cut:
                    block, pending = pending[:cut], pending[cut:]
                    yield self.edit(block)
            self.ended = True
            if pending.strip():  # an event the upstream never finished: SSE drops it
                log.warning("upstream stream ended inside an event; %d bytes dropped", len(pending))
            if last := self.tail():
                yield last
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise transport_error(exc) from exc
        finally:
            self._close()

    def _close(self) -> None:
        if self._done:
            return
        self._done = True
        if self.ended:  # whole: the connection goes back to the pool
            self._response.release()
        else:  # cut short: closed, so the upstream stops
            self._response.close()
        self.closed()


def boundary(buffer: bytes) -> int:
    """The end of the last whole event in ``buffer`` (0: none yet); SSE ends events with a blank line."""
    return max((at + len(mark) for mark in EVENT_ENDS if (at := buffer.rfind(mark)) >= 0), default=0)


def with_model(raw: bytes, model: str) -> bytes:
    """``raw`` JSON (or SSE events of JSON) with every ``"model"`` field naming ``model``: the client
    sees the name it asked for, never the operator's upstream name or a local model's file path."""
    name = orjson.dumps(model)
    return MODEL_FIELD.sub(lambda match: match.group(1) + name, raw) if b'"model"' in raw else raw


async def closed(stream: Any) -> None:
    """Close ``stream`` (an ``Events``, an async generator) even while a cancellation is pending."""
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        with anyio.CancelScope(shield=True):
            try:
                await closer()
            except Exception:  # an already broken stream may fail again on close; nothing is left to do
                log.debug("closing a stream failed", exc_info=True)


STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError, 401: openai.AuthenticationError, 403: openai.PermissionDeniedError,
    404: openai.NotFoundError, 409: openai.ConflictError, 422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def status_error(url: str, model: str, response: aiohttp.ClientResponse, raw: bytes) -> GatewayError:
    """What ``map_error`` makes of the exception the openai SDK raises for this answer: the status,
    Retry-After and the upstream's own error object. 401 and 403 are the operator's credentials
    (``forward.auth_failed``); 408 and 504 the upstream timing out, a 504 ``upstream_timeout`` as
    LiteLLM maps them. (For 502 and 503 LiteLLM drops the upstream's error object and its path
    answers with LiteLLM's message; the relay keeps it.)"""
    status = response.status
    request = httpx.Request("POST", url)
    if status in (408, 504):
        return map_error(openai.APITimeoutError(request=request))
    answer = httpx.Response(status, headers=list(response.headers.items()), content=raw, request=request)
    text = raw.decode("utf-8", errors="replace").strip()
    payload: Any = text
    try:
        payload = json.loads(text)
        message = f"Error code: {status} - {payload}"
    except ValueError:
        message = text or f"Error code: {status}"
    data = payload.get("error", payload) if isinstance(payload, dict) else payload
    if status == 400 and ExceptionCheckers.is_error_str_context_window_exceeded(text):
        # LiteLLM turns these into its ContextWindowExceededError (code context_length_exceeded,
        # which clients look for), with the upstream's message: the same on this path.
        inner = data.get("message") if isinstance(data, dict) else None
        return map_error(litellm.ContextWindowExceededError(
            message=f"ContextWindowExceededError: OpenAIException - {inner or message}",
            model=model, llm_provider="openai", response=answer))
    fallback = openai.InternalServerError if status >= 500 else openai.APIStatusError
    kind = STATUS_ERRORS.get(status) or fallback
    return map_error(kind(message, response=answer, body=data))


def transport_error(exc: BaseException) -> GatewayError:
    """A timeout is the gateway's 504 ``upstream_timeout``; any other failure of the connection
    (refused, dropped, a stream cut midway) its 502 ``upstream_connection_error``, as on the
    LiteLLM path."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, TimeoutError):
        return map_error(TimeoutError())
    return map_error(ConnectionError(type(exc).__name__))
