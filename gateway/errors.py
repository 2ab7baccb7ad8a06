"""One exception hierarchy for everything a client can be told, rendered as OpenAI error JSON.

Handlers and helpers raise these; ``app`` turns them into responses in exactly one place.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """An error with the HTTP status and the OpenAI ``error`` object the client should see."""

    status_code = 500
    error_type = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status_code: int | None = None,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else type(self).code
        self.status_code = status_code or type(self).status_code
        self.error_type = error_type or type(self).error_type
        self.headers = headers or {}

    def to_json(self) -> dict[str, Any]:
        return error_json(self.message, self.error_type, param=self.param, code=self.code)


def error_json(message: str, error_type: str, *, param: str | None = None, code: str | None = None) -> dict:
    """The body OpenAI clients parse: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class BadRequest(GatewayError):
    status_code = 400
    error_type = "invalid_request_error"


class ContextLengthExceeded(BadRequest):
    code = "context_length_exceeded"


class Unauthorized(GatewayError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class ModelNotFound(GatewayError):
    status_code = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class PayloadTooLarge(GatewayError):
    status_code = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class RequestTimeout(GatewayError):
    """The body did not arrive in time; the connection is closed, so its unread rest is dropped."""

    status_code = 408
    error_type = "invalid_request_error"
    code = "request_timeout"

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, headers={"Connection": "close"}, **kwargs)


class UnsupportedMediaType(GatewayError):
    status_code = 415
    error_type = "invalid_request_error"
    code = "unsupported_media_type"


class MisdirectedRequest(GatewayError):
    """A Host this gateway does not serve under (DNS rebinding against a loopback-only gateway)."""

    status_code = 421
    error_type = "invalid_request_error"
    code = "invalid_host"


class UpstreamError(GatewayError):
    """Anything the upstream provider (or the way to it) did wrong; status mapped by ``upstream``."""

    status_code = 502
    error_type = "api_error"


class ServiceUnavailable(GatewayError):
    """A server-side condition a retry can get past; ``retry_after`` seconds go in Retry-After."""

    status_code = 503
    error_type = "api_error"

    def __init__(self, message: str, *, retry_after: int, **kwargs: Any) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)}, **kwargs)


class Overloaded(ServiceUnavailable):
    """Shed by admission control: the compression queue or the request bodies in memory are full."""

    code = "overloaded"


class ModelUnavailable(ServiceUnavailable):
    """The model's own server is down (starting or restarting); retrying later helps."""

    code = "model_unavailable"


class CompressionUnavailable(ServiceUnavailable):
    """Compressing failed on the server (a worker crashed or timed out) and the original does not fit."""

    code = "compression_unavailable"


class CompressionFailed(GatewayError):
    """MixPR raised on this prompt (a bug, not the client's fault) and the original does not fit."""

    code = "compression_failed"
