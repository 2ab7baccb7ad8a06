"""File parts that point at a URL: refused, so a client never makes the gateway download anything.

LiteLLM downloads a ``file`` part whose ``file_id`` is an http(s) URL (up to 50 MB, and inlines it
as base64) for OpenAI-style upstreams, ``file_id``/``file_data`` URLs for Gemini and Bedrock, and an
Anthropic ``document`` with a URL source for its Anthropic provider. Such a download bypasses the
gateway's body limits, costs memory and time the request was never charged for, and is counted as a
765-token media part. So every API refuses them with a 400 naming the part: send the file's bytes
(``file_data``, a base64 ``data:`` URL) or the id of a file uploaded to the provider instead.

Parts nested inside other parts are walked too: an Anthropic ``tool_result`` (and the ``search_result``
and content ``document`` blocks inside it), a Responses ``function_call_output`` list. There an image
URL is refused as well: an image cannot stay inside a tool message on the way to a chat upstream, so
it is moved to a part that LiteLLM's Anthropic, Gemini and Bedrock transforms download on the event
loop. A top-level image URL goes to the provider as it is (the gateway counts each image as a fixed
765 tokens, ``gateway.compress.conversation``, rather than fetching it to measure it), except to a
provider whose LiteLLM transform downloads it itself (``gateway.upstream.forward.downloads_image_urls``:
Anthropic through the chat and Responses APIs, Bedrock, Vertex AI / Gemini, Ollama): refused there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.errors import BadRequest

CODE = "remote_file_not_supported"
FILE_FIELDS = ("file_id", "file_data", "file_url")
# Where an item (a message, a Responses input item) sits, in each API's own terms; the parts inside
# it are named after it: messages[0].content[1] (chat), input[0].content[1] (Responses),
# messages.0.content.1 (Anthropic, dotted).
CHAT = "messages[{i}]"
RESPONSES = "input[{i}]"
ANTHROPIC = "messages.{i}"
# Lists of parts inside a part or an item: a tool result's or a search result's blocks (Anthropic
# ``content``), a function call's output (Responses ``output``), a content document's blocks.
NESTED = ("content", "output")


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


def image_url_field(part: Any) -> str | None:
    """Where an image part (chat ``image_url``, Responses ``input_image``, Anthropic ``image``) holds
    an http(s) URL; None for inline bytes (a ``data:`` URL, base64) or a file id."""
    if not isinstance(part, dict):
        return None
    kind, source = part.get("type"), part.get("source")
    if kind == "image" and isinstance(source, dict):
        return "source.url" if source.get("type") == "url" or is_url(source.get("url")) else None
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return "image_url.url" if is_url(url) else None
    if kind == "input_image":
        return "image_url" if is_url(part.get("image_url")) else None
    return None


def refuse_urls(items: Sequence[Any], where: str, *, images: bool = False) -> None:
    """Raise a 400 for the first part of ``items`` (messages or input items) that points at a file
    URL, at any depth, or at an image URL inside another part (a tool result, a function output, a
    document), or anywhere when ``images`` (the upstream's LiteLLM path downloads image URLs);
    ``where`` formats an item's position in the API's own terms."""
    dotted = where == ANTHROPIC
    for i, item in enumerate(items):
        for key, parts in _nested(item):
            _refuse_in(parts, f"{where.format(i=i)}.{key}", dotted, images=images)


def _refuse_in(parts: list[Any], at: str, dotted: bool, *, images: bool) -> None:
    for k, part in enumerate(parts):
        here = f"{at}.{k}" if dotted else f"{at}[{k}]"
        field = url_field(part) or (image_url_field(part) if images else None)
        if field is not None:
            raise refused(f"{here}.{field}")
        for key, inner in _nested(part):
            _refuse_in(inner, f"{here}.{key}", dotted, images=True)


def _nested(node: Any) -> list[tuple[str, list[Any]]]:
    """The lists of parts directly inside ``node``, with the key that holds each."""
    if not isinstance(node, dict):
        return []
    found = [(key, node[key]) for key in NESTED if isinstance(node.get(key), list)]
    source = node.get("source") if node.get("type") == "document" else None
    if isinstance(source, dict) and isinstance(source.get("content"), list):
        found.append(("source.content", source["content"]))
    return found


def refused(param: str) -> BadRequest:
    return BadRequest(
        f"'{param}' is a URL, and this gateway does not download files for a request (the download "
        f"would bypass its size limits). Send the file's content inline (file_data as a base64 data: "
        f"URL; in Anthropic's API a base64 source), or upload it to the provider and send its file id.",
        param=param, code=CODE,
    )
