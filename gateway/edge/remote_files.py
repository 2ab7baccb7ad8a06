"""File parts that point at a URL: refused, so a client never makes the gateway download anything.

LiteLLM downloads a ``file`` part whose ``file_id`` is an http(s) URL (up to 50 MB, and inlines it
as base64) for OpenAI-style upstreams, ``file_id``/``file_data`` URLs for Gemini and Bedrock, and an
Anthropic ``document`` with a URL source for its Anthropic provider. Such a download bypasses the
gateway's body limits, costs memory and time the request was never charged for, and is counted as a
765-token media part. So every API refuses them with a 400 naming the part: send the file's bytes
(``file_data``, a base64 ``data:`` URL) or the id of a file uploaded to the provider instead.

Image URLs are not file parts: they go to the provider as they are, and the gateway counts each
image as a fixed 765 tokens (``gateway.compress.conversation``) rather than fetching it to measure it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.errors import BadRequest

CODE = "remote_file_not_supported"
FILE_FIELDS = ("file_id", "file_data", "file_url")
# Chat and the guardrail API: messages[0].content[1]; Responses: input[0]...; Anthropic: messages.0...
CHAT = "messages[{i}].content[{j}]"
RESPONSES = "input[{i}].content[{j}]"
ANTHROPIC = "messages.{i}.content.{j}"


def is_url(value: Any) -> bool:
    """Any scheme (``https://``, ``gs://`` ...) or a bare ``www.`` host. Base64 (a ``data:`` URL
    included) and provider file ids never contain ``://``, and LiteLLM's own checks are substring
    tests, so a URL anywhere in the value counts."""
    return isinstance(value, str) and ("://" in value or value.lstrip().lower().startswith("www."))


def url_field(part: Any) -> str | None:
    """Where a content part (chat ``file``, Responses ``input_file``, Anthropic ``document``) holds a
    URL to download, e.g. ``file.file_id``; None when it holds none."""
    if not isinstance(part, dict):
        return None
    kind = part.get("type")
    if kind == "file" and isinstance(part.get("file"), dict):
        return next((f"file.{k}" for k in FILE_FIELDS if is_url(part["file"].get(k))), None)
    if kind == "input_file":
        return next((k for k in FILE_FIELDS if is_url(part.get(k))), None)
    if kind == "document" and isinstance(part.get("source"), dict):
        source = part["source"]
        return "source.url" if source.get("type") == "url" or is_url(source.get("url")) else None
    return None


def refuse_urls(items: Sequence[Any], where: str) -> None:
    """Raise a 400 for the first file part of ``items`` (messages or input items, each with a list
    ``content``) that points at a URL; ``where`` formats its position in the API's own terms."""
    for i, item in enumerate(items):
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            field = url_field(part)
            if field is not None:
                raise refused(f"{where.format(i=i, j=j)}.{field}")


def refused(param: str) -> BadRequest:
    return BadRequest(
        f"'{param}' is a URL, and this gateway does not download files for a request (the download "
        f"would bypass its size limits). Send the file's content inline (file_data as a base64 data: "
        f"URL; in Anthropic's API a base64 source), or upload it to the provider and send its file id.",
        param=param, code=CODE,
    )
