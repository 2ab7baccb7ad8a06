"""Forwarding through ``litellm.acompletion``: building the call, streaming, mapping errors.

Parameters LiteLLM knows for the target provider are passed as its keyword arguments, so it can
translate them; every other body field goes into ``extra_body`` and so reaches the upstream as
sent. That is how "drop nothing" holds even for fields LiteLLM would silently discard (it drops
``user`` for OpenAI-compatible servers it does not recognise), and why a client can never set
LiteLLM's own connection options (``api_base``, ``api_key``, ...) from the request body.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
import httpx
import litellm
import openai
from litellm.llms.base_llm.chat.transformation import BaseLLMException
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration
from litellm.types.llms.openai import ValidUserMessageContentTypes

from gateway.config import ROUTER_ONLY_PARAMS, ModelEntry
from gateway.errors import GatewayError, UpstreamError, error_json
from gateway.run import offload
from gateway.upstream.redaction import decoded, redact, redacted, said

log = logging.getLogger("gateway.upstream.forward")
# Importing this module changes nothing in LiteLLM or the openai SDK: the gateway's process-wide
# settings and patches are ``gateway.upstream.patches.install``, which only the gateway's app calls.
T = TypeVar("T")

# LiteLLM client options: never taken from a request body, whatever LiteLLM would accept.
CLIENT_OPTIONS = frozenset({
    "api_base", "api_key", "api_version", "base_url", "organization", "deployment_id",
    "default_headers", "extra_headers", "headers", "timeout", "request_timeout", "max_retries",
    "num_retries", "custom_llm_provider", "mock_response", "model_list", "litellm_logging_obj",
})
# LiteLLM refuses user content parts of any other type (with an error that looks like a lost
# connection), so the API adapters check them first.
USER_PART_TYPES = tuple(ValidUserMessageContentTypes)
AUTH_STATUSES = frozenset({401, 403})
# Parameters LiteLLM names for OpenAI but leaves off the wire for a model it does not know: sent in
# extra_body, as the client sent them (the provider's cache retention the client asked for).
AS_SENT = frozenset({"prompt_cache_retention"})
# Credentials an upstream's error text may quote, each kept to its own alphabet (so the sentence
# around it survives) and anchored at a word start (so "task-force" is no key):
STATUS_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "invalid_request_error", 413: "invalid_request_error", 422: "invalid_request_error",
                429: "rate_limit_error"}


# Providers whose LiteLLM transform downloads an http(s) image URL itself (to inline it as base64),
# synchronously and up to MAX_IMAGE_URL_DOWNLOAD_SIZE_MB: the gateway refuses image URLs for them.
IMAGE_DOWNLOADERS = frozenset({"anthropic", "bedrock", "vertex_ai", "vertex_ai_beta", "gemini", "ollama",
                               "ollama_chat"})


def is_openai(model: str) -> bool:
    """Whether ``model`` (a LiteLLM model name) is served by LiteLLM's OpenAI(-compatible) provider."""
    try:
        return litellm.get_llm_provider(model)[1] == "openai"
    except Exception:  # an unknown provider: not OpenAI's
        return False


def downloads_image_urls(model: str) -> bool:
    """Whether LiteLLM fetches image URLs itself on its way to ``model`` (a LiteLLM model name)."""
    try:
        return litellm.get_llm_provider(model)[1] in IMAGE_DOWNLOADERS
    except Exception:  # an unknown provider: LiteLLM will refuse the call itself
        return False


@functools.lru_cache(maxsize=256)
def supported_params(model: str) -> frozenset[str]:
    """The OpenAI parameters LiteLLM maps for ``model`` (a LiteLLM name like ``openai/gpt-4o``)."""
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        found = litellm.get_supported_openai_params(model=name, custom_llm_provider=provider)
    except Exception:  # unknown provider: let LiteLLM see nothing it could misread
        return frozenset()
    return frozenset(found or ()) - CLIENT_OPTIONS


def build_call(
    entry: ModelEntry, params: dict[str, Any], messages: list[dict[str, Any]], *, timeout: float
) -> dict[str, Any]:
    """Keyword arguments for ``litellm.acompletion``: the deployment's settings plus the request's
    parameters (``stream`` is set by ``open_stream``)."""
    known = supported_params(entry.upstream_model)
    kwargs = _split_params(entry, params, known=known, skip=("messages",), timeout=timeout)
    kwargs["messages"] = messages
    # LiteLLM imports its MCP gateway (an optional dependency) whenever tools are present.
    kwargs["_skip_mcp_handler"] = True
    return kwargs


# The OpenAI parameters of the legacy endpoints, passed to LiteLLM by name; others go in extra_body.
# ``dimensions`` and ``user`` go in extra_body: LiteLLM refuses or drops them for models it does not know.
EMBEDDING_PARAMS = frozenset({"encoding_format"})
TEXT_COMPLETION_PARAMS = frozenset({
    "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
    "seed", "stop", "stream_options", "suffix", "temperature", "top_p", "user",
})


def build_passthrough_call(
    entry: ModelEntry, params: dict[str, Any], *, known: frozenset[str], timeout: float
) -> dict[str, Any]:
    """Keyword arguments for ``litellm.aembedding`` / ``atext_completion``: as ``build_call``, with
    that endpoint's own parameters by name."""
    return _split_params(entry, params, known=known, skip=(), timeout=timeout)


def _split_params(
    entry: ModelEntry, params: dict[str, Any], *, known: frozenset[str], skip: tuple[str, ...], timeout: float
) -> dict[str, Any]:
    """The model's LiteLLM params, then the request's: by name if ``known``, else in extra_body.

    ``model`` and ``stream`` (set by the caller), the gateway's own ``mixpr`` and ``skip`` (what the
    caller sets itself) are not copied."""
    kwargs = {k: v for k, v in entry.litellm_params.items() if k not in ROUTER_ONLY_PARAMS}
    kwargs.setdefault("timeout", timeout)
    kwargs.setdefault("max_retries", 0)  # retrying is the client's call; it sees Retry-After
    extra_body = dict(kwargs.pop("extra_body", None) or {})
    for key, value in params.items():
        if key in ("model", "mixpr", "stream") or key in skip:
            continue
        if key in known and key not in AS_SENT:
            kwargs[key] = value
        else:
            extra_body[key] = value
    if extra_body:
        kwargs["extra_body"] = extra_body
    return kwargs


async def _mapped(call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Any:
    """``call(**kwargs)``; whatever it raises is translated by ``map_error``."""
    try:
        return await call(**kwargs)
    except Exception as exc:
        raise map_error(exc) from exc


async def embed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``litellm.aembedding``'s answer as the JSON the client receives; a big input (and its as big
    answer) is handled in a worker thread (``gateway.upstream.patches``)."""
    if offload.is_big(kwargs):
        return await _offloaded(_embedding_answer, kwargs)
    return (await _mapped(litellm.aembedding, **kwargs)).model_dump()


def _embedding_answer(kwargs: dict[str, Any]) -> dict[str, Any]:
    return litellm.embedding(**kwargs).model_dump()


async def text_complete(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming legacy completion (``litellm.atext_completion``) as JSON; a list of many
    prompts (and its as long answer) is handled in a worker thread."""
    if offload.is_big(kwargs):
        return await _offloaded(_text_answer, kwargs)
    try:
        async with _closed_client(kwargs) as client:
            response = await litellm.atext_completion(**kwargs, **({"client": client} if client else {}))
    except Exception as exc:
        raise map_error(exc) from exc
    return response.model_dump()


def _text_answer(kwargs: dict[str, Any]) -> dict[str, Any]:
    with _own_client(kwargs) as client:
        return litellm.text_completion(**kwargs, **({"client": client} if client else {})).model_dump()


async def _offloaded(blocking: Callable[[dict[str, Any]], T], kwargs: dict[str, Any]) -> T:
    try:
        return await offload.run(blocking, kwargs)
    except Exception as exc:
        raise map_error(exc) from exc


@contextlib.asynccontextmanager
async def _closed_client(kwargs: dict[str, Any]) -> AsyncIterator[openai.AsyncOpenAI | None]:
    """For OpenAI-compatible servers, an HTTP client closed after the call: for a non-streaming
    legacy completion LiteLLM opens one per call and never closes it (sockets wait for the GC)."""
    if not _is_openai_compatible(kwargs):
        yield None
        return
    # LiteLLM's TLS setting (SSL_VERIFY, SSL_CERT_FILE, certifi's bundle), as the relays' (http.Policy):
    # one context it keeps for the process, where httpx built one per client, 29 ms of CPU on the loop.
    http_client = openai.DefaultAsyncHttpxClient(verify=get_ssl_configuration())
    client = openai.AsyncOpenAI(**_client_options(kwargs), http_client=http_client)
    try:
        yield client
    finally:
        await client.close()


@contextlib.contextmanager
def _own_client(kwargs: dict[str, Any]) -> Iterator[openai.OpenAI | None]:
    """``_closed_client`` for LiteLLM's blocking calls."""
    if not _is_openai_compatible(kwargs):
        yield None
        return
    http_client = openai.DefaultHttpxClient(verify=get_ssl_configuration())
    client = openai.OpenAI(**_client_options(kwargs), http_client=http_client)
    try:
        yield client
    finally:
        client.close()


def _is_openai_compatible(kwargs: dict[str, Any]) -> bool:
    try:
        _, provider, _, _ = litellm.get_llm_provider(kwargs["model"], api_base=kwargs.get("api_base"))
    except Exception:  # an unknown provider: LiteLLM will say so itself
        return False
    return provider in ("openai", "text-completion-openai")


def _client_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"api_key": kwargs.get("api_key"), "base_url": kwargs.get("api_base"),
            "timeout": kwargs.get("timeout"), "max_retries": 0}


async def open_text_stream(kwargs: dict[str, Any]) -> Any:
    """Start a streaming legacy completion; read it with ``stream_chunks``."""
    return await _mapped(litellm.atext_completion, **{**kwargs, "stream": True})


async def complete(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming completion as the JSON the client receives."""
    return (await _mapped(litellm.acompletion, **kwargs)).model_dump()


async def open_stream(kwargs: dict[str, Any]) -> Any:
    """Start a streaming completion; errors before the first byte still get a proper status."""
    return await _mapped(litellm.acompletion, **{**kwargs, "stream": True})


async def stream_chunks(stream: Any) -> AsyncIterator[dict[str, Any]]:
    """The stream's chunks as dicts; a failure midway raises the mapped ``GatewayError``."""
    try:
        async for chunk in stream:
            yield chunk.model_dump(exclude_none=True)
    except Exception as exc:
        raise map_error(exc) from exc
    finally:
        await _close(stream)


async def _close(stream: Any) -> None:
    # When the client disconnects, Starlette cancels us: close the upstream response as well. The
    # close is shielded, or the pending cancellation would abort it at its first await.
    closer = getattr(stream, "aclose", None) or getattr(getattr(stream, "completion_stream", None),
                                                        "aclose", None)
    if closer is not None:
        with anyio.CancelScope(shield=True):
            try:
                await closer()
            except Exception:  # closing an already broken stream may fail again; nothing left to do
                pass


def map_error(exc: BaseException) -> GatewayError:
    """Translate whatever LiteLLM raised into the status and OpenAI error the client should see."""
    if isinstance(exc, GatewayError):
        return exc
    causes = _causes(exc)
    unread = _unread_answer(causes)
    if unread is not None:  # LiteLLM could not read a 2xx: the upstream's answer, not our bug
        return unread
    if not any(_from_the_wire(c) for c in causes):  # our own bug: not the upstream's fault
        log.error("unexpected %s while calling the upstream", type(exc).__name__)
        return GatewayError("The gateway hit an internal error.", status_code=500)
    if any(isinstance(c, litellm.Timeout | openai.APITimeoutError | asyncio.TimeoutError) for c in causes):
        return UpstreamError("The upstream model did not answer in time.", status_code=504,
                             code="upstream_timeout")
    if any(_is_connection_failure(c) for c in causes):
        return UpstreamError("Could not reach the upstream model (connection failed).", status_code=502,
                             code="upstream_connection_error")
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) and 400 <= status <= 599 else 502
    if status in AUTH_STATUSES:
        return auth_failed(status)
    error = _upstream_error_object(exc, causes, status)
    for field in ("message", "param", "type", "code"):  # every value the upstream chose, a list or an
        error[field] = redacted(error.get(field))  # object too (``"param": ["..."]``), once decoded
    if status == 500 and _is_mislabelled_validation(error):
        status, error = 400, _validation_error(error["message"])
    return UpstreamError(error["message"], status_code=status, error_type=error["type"],
                         param=error["param"], code=error["code"], headers=_retry_after(exc))


def invalid_answer() -> UpstreamError:
    """A 2xx whose body is no answer of the API asked (text, a page, events where none were asked)."""
    return UpstreamError("The upstream model sent an answer that is not JSON.", status_code=502,
                         code="upstream_invalid_response")


def _unread_answer(causes: list[BaseException]) -> GatewayError | None:
    """A 2xx LiteLLM's provider code could not read as an answer, as the relays map the same body;
    None for anything else. LiteLLM raises its provider's error with the answer's own 2xx status
    (Anthropic's ``Unable to get json response``, or the repr of an ``error`` the body held) and
    wraps it in an ``APIConnectionError`` with no network failure behind it: a 2xx status is what
    tells it from a bug of the gateway's, which never carries one."""
    # A provider may set the body's error code as the status (``"server_error"``): only an int is one.
    unread = next((c for c in causes if isinstance(c, BaseLLMException) and isinstance(c.status_code, int)
                   and 200 <= c.status_code < 300 and not c.status_code_is_synthesized), None)
    if unread is None:
        return None
    if any(isinstance(c, json.JSONDecodeError) for c in causes):  # the body was no JSON
        return invalid_answer()
    said = _literal(unread.message)  # str() of the body's error object: a repr, decoded here
    return stream_error(said if isinstance(said, dict) else unread.message)


def stream_error(error: Any) -> GatewayError:
    """An error object an upstream sent with a 2xx (an answer's, a stream event's) as ``map_error``
    maps the ``APIError`` the openai SDK raises for one midway: its own type and code, its message
    redacted, a 502."""
    body = error if isinstance(error, dict) else {"message": str(error)}
    message = body.get("message")
    if not isinstance(message, str):
        body = {**body, "message": "The upstream model failed during the stream."}
    request = httpx.Request("POST", "http://upstream/")
    return map_error(openai.APIError(body["message"], request, body=body))


def _literal(text: str) -> Any:
    """A Python literal's value (LiteLLM formats an upstream's error dict with str()), else None."""
    with contextlib.suppress(ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return ast.literal_eval(text)
    return None


def auth_failed(status: int) -> UpstreamError:
    """An upstream 401/403 is about the operator's credentials, not the client's: a 502 in the
    gateway's own words, the status in ``x-mixpr-upstream-status`` and the log. The upstream's text
    never reaches the client: OpenAI's quotes part of the key ("Incorrect API key provided: sk-...")."""
    log.warning("the upstream refused the gateway's credentials (status %d): check the model's api_key",
                status)
    return UpstreamError("The upstream model refused the gateway's own credentials; the gateway's operator "
                         "has to fix them.", status_code=502, code="upstream_auth_failed",
                         headers={"x-mixpr-upstream-status": str(status)})


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _from_the_wire(exc: BaseException) -> bool:
    # LiteLLM's exceptions all derive from openai's; transports raise httpx/aiohttp/OS errors.
    # LiteLLM also wraps its own bugs (an AttributeError on a message it did not expect) in
    # APIConnectionError, so that one counts only through a transport error among its causes.
    if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
        return False
    return isinstance(exc, openai.OpenAIError | httpx.HTTPError | OSError | asyncio.TimeoutError) or (
        type(exc).__module__.startswith("aiohttp")
    )


def _is_connection_failure(exc: BaseException) -> bool:
    return isinstance(exc, openai.APIConnectionError | httpx.TransportError | ConnectionError) or (
        type(exc).__name__ in {"ClientConnectorError", "ServerDisconnectedError", "ClientOSError"}
    )


def _upstream_error_object(exc: BaseException, causes: list[BaseException], status: int) -> dict[str, Any]:
    """The upstream's own error object when it sent one, else one built from its decoded body, else
    from the exception. Never from the exception's text when a body is known: the SDK formats a body
    that is not OpenAI's through repr, whose escapes (``\\n``) hide what follows from redaction."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    fallback = STATUS_TYPES.get(status, "api_error")
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return {"message": body["message"], "type": body.get("type") or fallback,
                "param": body.get("param"), "code": body.get("code")}
    if isinstance(body, dict) and "detail" in body:  # FastAPI servers (llama_cpp.server, vLLM) send this
        detail = body["detail"]
        return error_json(_detail_message(detail), fallback, param=_detail_param(detail))["error"]
    code = "context_length_exceeded" if isinstance(exc, litellm.ContextWindowExceededError) else None
    message = redact(str(getattr(exc, "message", "") or exc)) or f"Upstream error ({status})."
    if isinstance(body, str):  # TGI's {"error": "<text>"}: the text, decoded
        message = _text_of(body)
    elif code is None and (said_by := _cause_body(causes)) is not None:  # {"errors": [...]}, or dropped
        message = f"Error code: {status} - {_text_of(said_by)}"
    return error_json(message, fallback, code=code)["error"]


def _text_of(body: Any) -> str:
    """What a body the openai SDK kept says, redacted once decoded: a text that is not JSON (an event
    stream where none was asked for) through ``redaction.decoded`` too."""
    return said(decoded(body) if isinstance(body, str) else redacted(body))


def _cause_body(causes: list[BaseException]) -> Any:
    """The upstream's decoded body, as the openai SDK kept it on one of the causes (LiteLLM's own
    exception may hold none, or a text that formats the body through repr)."""
    return next((c.body for c in causes if getattr(c, "body", None) is not None), None)  # type: ignore[attr-defined]


def _detail_message(detail: Any) -> str:
    """FastAPI's ``{"detail": [{"loc": [...], "msg": ...}, ...]}`` (or a plain string) as one line."""
    if not isinstance(detail, list):
        return str(detail)
    parts = []
    for item in detail[:5]:
        if isinstance(item, dict):
            where = ".".join(_loc(item.get("loc")))
            parts.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
    return "Invalid request: " + "; ".join(parts) if parts else "Invalid request."


def _loc(loc: Any) -> list[str]:
    # Skip "body" and pydantic's union-member names (``ChatCompletionRequestUserMessage``).
    parts = loc if isinstance(loc, list | tuple) else ()
    return [str(p) for p in parts if p != "body" and not (isinstance(p, str) and p[:1].isupper())]


def _detail_param(detail: Any) -> str | None:
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return ".".join(_loc(detail[0].get("loc"))) or None
    return None


# llama_cpp.server's error route turns its own request validation errors into a 500 whose message
# is pydantic's "N validation error(s):" list followed by a traceback line; it is the client's fault.
_PYDANTIC_ERRORS = re.compile(r"^\d+ validation errors?:")


def _is_mislabelled_validation(error: dict[str, Any]) -> bool:
    return error["type"] == "internal_server_error" and bool(_PYDANTIC_ERRORS.match(error["message"]))


def _validation_error(message: str) -> dict[str, Any]:
    lines = [line.strip() for line in message.splitlines()[1:6]]
    found = [line for line in lines if line.startswith("{")]  # pydantic's error dicts, not the traceback
    detail = []
    for line in found:
        with contextlib.suppress(ValueError, SyntaxError, RecursionError, MemoryError):
            detail.append(ast.literal_eval(line[:4000]))
    text = _detail_message(detail) if detail else "The upstream model rejected the request as invalid."
    return error_json(text, "invalid_request_error", param=_detail_param(detail))["error"]


def _retry_after(exc: BaseException) -> dict[str, str]:
    for source in (getattr(exc, "litellm_response_headers", None), getattr(exc, "headers", None),
                   getattr(getattr(exc, "response", None), "headers", None)):
        value = source.get("retry-after") if source else None
        if value:
            return {"Retry-After": str(value)}
    return {}
