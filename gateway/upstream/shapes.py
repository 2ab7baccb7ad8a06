"""Where each API's answer names its model, and that one name replaced by the name the client asked
for (never the operator's upstream name or a local model's file path).

Only the answer's own field is the gateway's to rename: a ``"model"`` key anywhere else (a tool
call's ``input``, an upstream's metadata) belongs to the model's output and reaches the client byte
for byte. The bytes are edited in place, not parsed and written again, so everything but the name
stays as the upstream sent it (spacing, number forms, escapes).

The path of keys to the field, per shape:

* a chat.completion, each chat.completion.chunk, an Anthropic message: ``model``;
* Anthropic's ``message_start`` event: ``message.model`` (its other events name no model).

* a Responses object: ``model``; a Responses event: ``response.model`` (``responses_relay``: the
  relayed ones; those built from chat are the gateway's own, with the name asked for).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import orjson

Path = tuple[str, ...]

CHAT: tuple[Path, ...] = (("model",),)  # an answer or a chunk
MESSAGE: tuple[Path, ...] = (("model",),)  # a non-streamed Anthropic message
MESSAGE_EVENT: tuple[Path, ...] = (("message", "model"),)  # message_start

# Numbers and constants are skipped, never converted (a 5,000-digit integer would raise).
_SKIP = json.JSONDecoder(strict=False, parse_int=len, parse_float=len, parse_constant=len)
_SPACE = re.compile(r"[ \t\n\r]*")
MODEL_KEY = b'"model"'
# A data line's value; a line starts after CRLF, LF or CR (re.MULTILINE's ^ knows only LF).
_DATA = re.compile(rb"(?:^|(?<=[\r\n]))data:[ ]?([^\r\n]*)")


def renamed(raw: bytes, paths: tuple[Path, ...], model: str) -> bytes:
    """``raw`` JSON with the string at each of ``paths`` naming ``model``; unchanged when it has none
    (or is not JSON: what the client gets then is the upstream's own business)."""
    last = raw.rfind(MODEL_KEY)
    if last < 0:  # the common case of most events: nothing to look for
        return raw
    # latin-1 maps byte i to character i: offsets in the text are offsets in the bytes.
    text = raw.decode("latin-1")
    spans = sorted(span for path in paths for span in _strings_at(text, path, 0, last))
    if not spans:
        return raw
    name = orjson.dumps(model)
    out, at = [], 0
    for start, end in spans:
        out += [raw[at:start], name]
        at = end
    out.append(raw[at:])
    return b"".join(out)


def renamed_event(event: bytes, paths: tuple[Path, ...], model: str) -> bytes:
    """One server-sent event with its data's model renamed (``renamed``). Data of one line, as every
    upstream sends it, is edited where it stands; data over several lines is joined to be read, and
    left as it is when the field spans lines."""
    lines = list(_DATA.finditer(event))
    if len(lines) != 1:
        return _renamed_lines(event, lines, paths, model)
    start, end = lines[0].span(1)
    return event[:start] + renamed(event[start:end], paths, model) + event[end:]


def _renamed_lines(event: bytes, lines: list[re.Match[bytes]], paths: tuple[Path, ...], model: str) -> bytes:
    if not lines:
        return event
    joined = b"\n".join(line.group(1) for line in lines)
    edited = renamed(joined, paths, model)
    if edited == joined or edited.count(b"\n") != len(lines) - 1:
        return event
    out, at = [], 0
    for line, value in zip(lines, edited.split(b"\n"), strict=True):
        out += [event[at:line.start(1)], value]
        at = line.end(1)
    out.append(event[at:])
    return b"".join(out)


def _strings_at(text: str, path: Path, start: int, last: int) -> Iterator[tuple[int, int]]:
    """The spans of the string values at ``path`` in the JSON object at ``start`` (every one, should
    a key repeat: a client's parser keeps the last); members after ``last`` (the last ``"model"``
    in the text) are not read, so an answer's long ``choices`` after its ``model`` cost nothing."""
    try:
        for key, begin, end in _members(text, start, last):
            if key != path[0]:
                continue
            if len(path) > 1:
                yield from _strings_at(text, path[1:], begin, last)
            elif text[begin] == '"':
                yield begin, end
    except (ValueError, IndexError, RecursionError):  # not JSON (or too deep to read): leave it
        return


def _members(text: str, at: int, last: int) -> Iterator[tuple[str, int, int]]:
    """(key, value start, value end) of each member of the JSON object at ``at`` whose key starts by
    ``last``; values are skipped by the json module's C scanner, one pass over their bytes."""
    at = _space(text, at)
    if text[at] != "{":
        return
    at = _space(text, at + 1)
    while text[at] != "}" and at <= last:
        if text[at] != '"':
            raise ValueError("a key was expected")
        key, at = json.decoder.scanstring(text, at + 1, False)
        at = _space(text, at)
        if text[at] != ":":
            raise ValueError("':' was expected")
        begin = _space(text, at + 1)
        _, end = _SKIP.raw_decode(text, begin)
        yield key, begin, end
        at = _space(text, end)
        if text[at] == ",":
            at = _space(text, at + 1)
        elif text[at] != "}":
            raise ValueError("',' was expected")


def _space(text: str, at: int) -> int:
    """The first offset from ``at`` that is not JSON whitespace (compact JSON has none)."""
    return at if text[at] not in " \t\n\r" else _SPACE.match(text, at).end()
