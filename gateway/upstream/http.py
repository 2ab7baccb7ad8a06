"""How the raw relays reach upstreams over HTTP: the proxy and TLS policy, and the one pooled client.

As httpx keeps its ``_config`` apart from its ``_transports``: :class:`Policy` is read once from the
environment, the way LiteLLM reads it (``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` unless
``NO_PROXY`` names the host; ``SSL_VERIFY``, ``SSL_CERT_FILE``, else certifi's bundle), so a model is
reached the same way whether its request is relayed or goes through LiteLLM; :class:`Client` is the
one bounded, pooled aiohttp session both relays (``chat_relay``, ``relay``) share. aiohttp rather than
httpx: httpx's pool walks every connection for every request, which held a relay at c=32 to fewer
requests per second than at c=4 (measured, bench/README.md).

The rest of the way out has a module each: whole server-sent events (``sse``), what an upstream's
status means for the client (``statuses``), where each API's answer names its model (``shapes``).
``http.closed``, which the API layer calls, stays importable from here.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

from gateway.upstream.sse import MAX_EVENT_BYTES
from gateway.upstream.sse import closed as closed  # the API layer closes its streams through this module
from gateway.upstream.statuses import transport_error

KEEPALIVE_S = 30.0  # idle upstream connections are kept this long


@dataclass(frozen=True)
class Policy:
    """How upstreams are reached: pool bound, keep-alive, TLS verification (proxies: :func:`proxy_for`),
    and the largest server-sent event a stream may hold (``sse.Framer``)."""

    max_connections: int
    verify: ssl.SSLContext | bool
    keepalive_s: float = KEEPALIVE_S
    max_event_bytes: int = MAX_EVENT_BYTES

    @classmethod
    def from_env(cls, *, max_connections: int, max_event_bytes: int = MAX_EVENT_BYTES) -> Policy:
        # LiteLLM's own reading of SSL_VERIFY and SSL_CERT_FILE (certifi's bundle when neither is set).
        verify = get_ssl_configuration()
        return cls(max_connections, verify if isinstance(verify, ssl.SSLContext) else bool(verify),
                   max_event_bytes=max_event_bytes)


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
        """The upstream's response, its body unread (read it, or hand it to ``sse.Events``)."""
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
