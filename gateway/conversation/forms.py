"""One message's form: what is sent for it, a pure function of the message and what it answers.

A long message (a tool result, a pasted document, a long user message) is compressed once, when it
is first seen, for what it answers: a tool result for the call that produced it (name, arguments, the
assistant text that made the call) and the task (the conversation's first user message); a user
message for its own question (its last paragraph). Nothing of later turns enters, so every instance,
cold or warm, computes the same bytes for it, and a request's compressed form is the concatenation of
its messages' forms (``gateway.conversation.history``).

This is the *first-sight* form (the message itself when it is short, an error, or not text). A
deliberate reset (``gateway.conversation.resets``) later cuts the older messages again, together and for
the task (``gateway.conversation.recut``): the agent's own long words and the long string values of its
old tool-call arguments too (the JSON staying valid), a piece that keeps nothing becoming a one-line
placeholder.

Forms are computed in the worker pool (``form_job``) and remembered by content hash in a
:class:`FormCache`, bounded in bytes, least recently used first, with a per-entry cap so that one
long conversation never flushes the others.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import mixpr.engine
from gateway.compress import messages as shape
from gateway.config import Prefix
from gateway.conversation import json_values
from mixpr import kinds
from mixpr.tokens import count_tokens

VERBATIM_ROLES = frozenset({"system", "developer"})
QUESTION_MAX_CHARS = 2000  # a user message's question: its last paragraph, at most this long
# An output that says it failed is read whole by the agent's next step (and is usually short).
ERROR_START = re.compile(r"\A\s*(?:error\b|exception\b|traceback \(most recent call last\)|fatal\b|"
                         r"\S+: (?:command not found|no such file or directory))", re.IGNORECASE)
ERROR_MAX_CHARS = 20_000  # a longer output that starts with "Error" is a log like any other
ARGUMENT_MIN_CHARS = 800  # tool-call string values shorter than this stay as written
# A call's arguments that keep nothing still keep this many characters of short top-level values
# (paths, names, flags: what the call is known by; gateway.conversation.forms.placeholder).
IDENTIFYING_CHARS = 240
# A tool output's head and tail, each: what a client's own cut keeps (Codex and mini-swe-agent keep the
# first and last 2,000 characters of an output over 4,000), so a first-sight form is never behind it.
EDGE_CHARS = 2000
EDGE_SHARE = 0.9  # the head and tail take at most this share of a form's budget
CODE_CAP_SHARE = 1 / 3  # a code output's larger first-sight form keeps at most this share of the cap
MIDDLE_MIN_TOKENS = 24  # less room than this for the middle: a marker says what was left out
# An "output line(s)" marker of MixPR's, numbered within the middle it was given.
_OUTPUT_LINES = re.compile(r"(\[… (?:part of )?output lines? )(\d+)(?:–(\d+))?")


@dataclass(frozen=True)
class Piece:
    """One compressible text of a message: its ``content`` (``part`` None), one of its text parts, or
    (``call`` set) the arguments of one of its tool calls."""

    message: int
    part: int | None
    call: int | None
    role: str
    text: str
    query: str  # what it answers, outside the text
    source: str | None  # the file a tool result shows, when the call names it
    question: bool  # a user message: its last paragraph is its question and is always kept
    first_sight: bool  # compressed from level 0 (else only in resets)
    title: str = ""  # what produced it: a tool result's call (name and arguments)


def pieces(messages: list[dict[str, Any]], verbatim_ids: frozenset[str] = frozenset()) -> list[Piece]:
    """The compressible pieces of ``messages``, in order. System and developer messages, images and
    other media, thinking blocks, names and ids never are; neither are error tool results
    (``verbatim_ids``: results the client marked ``is_error``, or outputs that say they failed) nor
    assistant messages that carry thinking blocks (their provider checks them as sent)."""
    task = next((shape.text(m) for m in messages if m.get("role") == "user"), "")
    calls: dict[str, tuple[dict[str, Any], str]] = {}
    found: list[Piece] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    calls[call["id"]] = (call.get("function") or {}, shape.text(message))
            if not shape.thinks(message):
                found += _own_pieces(index, message, task)
        elif role == "tool" and not _is_error(message, verbatim_ids):
            function, said = calls.get(message.get("tool_call_id") or "", ({}, ""))
            query = "\n".join((f"{function.get('name', '')} {function.get('arguments', '')}", said, task))
            source = _path(function.get("arguments"))
            title = f"{function.get('name', '')} {function.get('arguments', '')}"
            found += [replace(p, title=title) for p in _texts(index, message, query, source, question=False,
                                                                first=True)]
        elif role == "user" and shape.observation(messages, index):  # a text-based agent's tool output
            query = "\n".join((shape.text(messages[index - 1]), task))
            found += [replace(p, role="tool", title="observation")
                      for p in _texts(index, message, query, None, question=False, first=True)]
        elif role == "user":
            found += _asked(_texts(index, message, "", None, question=True, first=True))
    return found


def _asked(parts: list[Piece]) -> list[Piece]:
    """A user message's text parts: a client that attaches a document sends it as a part of its own
    and the question as the last part, so the earlier parts answer the last part's question
    (``query``: their forms are cut for it, as one string's body is cut for its last paragraph)."""
    if len(parts) < 2:
        return parts
    question = split_question(parts[-1].text)[1]
    return [*(replace(p, query=question) for p in parts[:-1]), parts[-1]]


def _own_pieces(index: int, message: dict[str, Any], task: str) -> list[Piece]:
    """An assistant message's words and call arguments: compressible in resets only."""
    found = _texts(index, message, task, None, question=False, first=False)
    for number, call in enumerate(message.get("tool_calls") or ()):
        arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        if isinstance(arguments, str) and len(arguments) > ARGUMENT_MIN_CHARS:
            # Cut at first sight too (a file the agent wrote, a long command): the agent's next step
            # reads the tool's result, not its own call again, and a later step can read the file.
            found.append(Piece(index, None, number, "assistant", arguments, task, None, False, True))
    return found


def _texts(index: int, message: dict[str, Any], query: str, source: str | None, *, question: bool,
           first: bool) -> list[Piece]:
    content = message.get("content")
    role = message.get("role", "")
    if isinstance(content, str):
        return [Piece(index, None, None, role, content, query, source, question, first)] if content else []
    if not isinstance(content, list):
        return []
    return [Piece(index, i, None, role, p["text"], query, source, question, first)
            for i, p in enumerate(content) if shape.is_text(p) and p["text"]]


def _is_error(message: dict[str, Any], verbatim_ids: frozenset[str]) -> bool:
    if message.get("tool_call_id") in verbatim_ids:
        return True
    text = shape.text(message)
    return len(text) <= ERROR_MAX_CHARS and bool(ERROR_START.match(text))


def _path(arguments: Any) -> str | None:
    """A ``path`` (or ``file_path``) argument of the call: the file the result shows."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    path = parsed.get("path") or parsed.get("file_path")
    return path if isinstance(path, str) else None


# -- budgets ---------------------------------------------------------------------------------------


def budget(piece: Piece, tokens: int, settings: Prefix, cap: int, *, sent_whole: bool = False) -> int | None:
    """Tokens ``piece`` (of ``tokens``) keeps at first sight; None: sent as it is. ``cap``: the most a
    first-sight form may keep (a share of the room: a small window). A user message (a task,
    instructions, a pasted document) is cut at first sight only over ``cap``: what the user wrote is
    read whole while it fits. Later cuts are a reset's (``gateway.conversation.recut``).
    ``sent_whole``: a cost budget, where a pasted document and its question were sent alone compressed
    to the cap; its form is then that cut, so the second request reads the first from the cache (a
    smaller form would rewrite it)."""
    if piece.call is not None:  # tool-call arguments: their long strings keep a fixed share
        kept = settings.argument_tokens
        return kept if piece.first_sight and kept and tokens > 2 * kept else None
    above = cap if piece.question else min(settings.min_tokens, cap)
    if not piece.first_sight or tokens <= above:
        return None
    if piece.question and sent_whole:
        return min(tokens, cap) if cap < tokens else None
    keep = settings.document_keep if piece.question else settings.keep
    base = settings.keep_tokens if piece.question else output_keep(piece.text, settings, cap)
    first = min(tokens, cap, int(base + keep * (tokens - base)))
    return first if first < tokens else None


def output_keep(text: str, settings: Prefix, cap: int) -> int:
    """What a long output keeps at first sight before its share of the rest: more when it reads as
    code (``mixpr.kinds``: a file view, a listing), whose lines agents quote steps later; a log's or
    a grep's they rarely do (``Prefix.code_keep``). The more is at most ``CODE_CAP_SHARE`` of the cap:
    a small budget must still hold a few steps (an 8-step loop under a 3,000-token budget reset at
    every request)."""
    if kinds.resolve(text, "auto") != "code":
        return settings.keep_tokens
    more = min(int(settings.code_keep * settings.keep_tokens), int(cap * CODE_CAP_SHARE))
    return max(settings.keep_tokens, more)


def key(piece: Piece, asked: int, salt: str) -> str:
    """The content hash of one form: the piece, what it answers, its budget and the config."""
    digest = hashlib.blake2b(digest_size=20)
    for value in (salt, piece.role, piece.text, piece.query, piece.source or "", str(piece.question),
                  str(piece.call is not None), str(asked)):
        digest.update(value.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


# -- in a worker -----------------------------------------------------------------------------------


def form_job(piece: Piece, asked: int, model: str | None) -> tuple[str, int]:
    """The form of ``piece`` within ``asked`` tokens, and its tokens. Runs in the worker pool."""
    if asked == 0:
        form = placeholder(piece)
    elif piece.call is not None:
        form = _arguments(piece.text, asked, piece.query, model)
    elif piece.question:
        form = _with_question(piece.text, asked, model, piece.query)
    else:
        form = edged(piece.text, asked, piece.query, piece.source, model)
    return form, count_tokens(form, model)


def placeholder(piece: Piece) -> str:
    lines = piece.text.count("\n") + 1
    what = {"tool": "tool output", "user": "message", "assistant": "text"}.get(piece.role, "text")
    if piece.call is not None:
        return _arguments_placeholder(piece.text)
    return f"[… {what} of {lines} lines omitted to fit the context; ask for it again if it is needed …]"


def _arguments_placeholder(arguments: str) -> str:
    """A call's arguments that keep nothing else: their short one-line top-level values (the file
    it read or wrote, a name, a flag: what the call is later known by), and a note of the rest."""
    note = f"{len(arguments)} characters of arguments, cut to fit the context"
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        parsed = None
    kept: dict[str, Any] = {}
    if isinstance(parsed, dict):
        room = IDENTIFYING_CHARS
        for name, value in parsed.items():
            size = len(name) + len(json.dumps(value, ensure_ascii=False)) if _identifying(value) else 0
            if 0 < size <= room and name != "omitted":
                kept[name] = value
                room -= size
    return json.dumps({**kept, "omitted": note}, ensure_ascii=False)


def _identifying(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= IDENTIFYING_CHARS // 2 and "\n" not in value
    return value is None or isinstance(value, bool | int | float)


def _compressed(text: str, asked: int, query: str, source: str | None, model: str | None) -> str:
    return mixpr.engine.compress(text, budget_tokens=max(1, asked), kind="auto", query=query, source=source,
                          model=model).text


def edged(text: str, asked: int, query: str, source: str | None, model: str | None) -> str:
    """A long text's first-sight form within ``asked`` tokens: its head and tail, as a client's own
    cut keeps them (at most ``EDGE_CHARS`` each, less for a small budget), and what MixPR picks from
    the middle for ``query``, cut by content kind. So the form holds at least what head+tail would at
    its size, and the middle's best lines besides. Dense text (CJK: a token a character) can overrun
    the edges' estimate (line ends are up to 200 characters away) or leave no room for the marker: a
    form over ``asked`` is MixPR's own cut of the whole text instead, which fits."""
    edge = min(EDGE_CHARS, 2 * asked)  # characters a side: about half the budget each at 4 a token
    head, middle, tail = _cut(text, edge)
    edges = count_tokens(head, model) + count_tokens(tail, model)
    if edges > EDGE_SHARE * asked:  # dense text (numbers, code): edges as wide as the budget allows
        head, middle, tail = _cut(text, int(edge * EDGE_SHARE * asked / edges))
        edges = count_tokens(head, model) + count_tokens(tail, model)
    if not middle:  # all edges: nothing in between to choose from
        return _compressed(text, asked, query, source, model)
    room = asked - edges
    kept = _compressed(middle, room, query, source, model) if room >= MIDDLE_MIN_TOKENS else ""
    lines = head.count("\n")
    # A room under a block and its marker keeps the middle's first tokens, unmarked: no better than none.
    if not kept.strip() or (kept != middle and "[…" not in kept):
        last = lines + middle.count("\n") + (not middle.endswith("\n"))
        kept = f"[… output lines {lines + 1}–{last} omitted …]\n"
    elif lines:  # MixPR numbered the middle's lines from 1: the output's own numbers
        kept = _OUTPUT_LINES.sub(lambda m: _shifted(m, lines), kept)
    form = head + kept + tail
    return form if count_tokens(form, model) <= asked else _compressed(text, asked, query, source, model)


def _cut(text: str, edge: int) -> tuple[str, str, str]:
    """``text`` as its head and tail (about ``edge`` characters each, on line ends) and what lies
    between ("" when they meet)."""
    head_end, tail_start = _line_after(text, edge), _line_before(text, len(text) - edge)
    if tail_start <= head_end:
        return text, "", ""
    return text[:head_end], text[head_end:tail_start], text[tail_start:]


def _shifted(match: re.Match[str], by: int) -> str:
    first = f"{match.group(1)}{int(match.group(2)) + by}"
    return f"{first}–{int(match.group(3)) + by}" if match.group(3) else first


def _line_after(text: str, at: int) -> int:
    """The end of the line ``at`` falls in (after its newline), if that line is short; else ``at``."""
    end = text.find("\n", at, at + 200)
    return at if end < 0 or at <= 0 else end + 1


def _line_before(text: str, at: int) -> int:
    """The start of the line after ``at``, if near; else ``at``."""
    start = text.find("\n", at, at + 200)
    return at if start < 0 else start + 1


def _with_question(text: str, asked: int, model: str | None, query: str = "") -> str:
    """A user message (a pasted document and its question): MixPR's sentence-level retrieval, as a
    single question is compressed, with the question (its last paragraph) as the query and always
    kept. ``query``: a document part whose question is a later part of its message; the form is
    its text cut for that question, without it. The heuristic router: an LLM's answer could differ
    between instances."""
    body, question = (text, query) if query else split_question(text)
    if not body:
        return text
    joined = f"{body}\n\n{question}"
    kept = mixpr.engine.compress(joined, budget_tokens=max(1, asked), route="heuristic", model=model,
                                 query_span=(len(joined) - len(question), len(joined))).text
    if query and kept.rstrip().endswith(question):  # the question stays in its own part
        kept = kept.rstrip()[: -len(question)].rstrip()
    return kept


def split_question(text: str) -> tuple[str, str]:
    """``text`` as (body, question): the question is its last paragraph, at most
    ``QUESTION_MAX_CHARS`` long (then its tail)."""
    end = len(text.rstrip())
    floor = max(0, end - QUESTION_MAX_CHARS)
    blank = text.rfind("\n\n", floor, end)
    start = floor if blank < 0 else blank + 2
    return text[:start].rstrip(), text[start:end].strip()


def _arguments(arguments: str, asked: int, query: str, model: str | None) -> str:
    """Tool-call arguments with their long string values compressed as text (the JSON stays valid);
    unchanged when they are not JSON."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments
    total = max(1, count_tokens(arguments, model))
    try:
        shrunk = _strings(parsed, lambda s: edged(s, max(1, asked * count_tokens(s, model) // total),
                                                  query, None, model))
        return json.dumps(shrunk, ensure_ascii=False)
    except RecursionError:  # parsed, but nested too deep to walk (and write) again: kept as written
        return arguments


def _strings(value: Any, shrink: Any) -> Any:
    return json_values.long_replaced(value, ARGUMENT_MIN_CHARS, shrink)


# -- the cache -------------------------------------------------------------------------------------


class FormCache:
    """Forms by content hash, bounded in bytes; least recently used first out. An entry over
    ``1/ENTRY_SHARE`` of the bound is not kept, so one huge message never empties the cache."""

    ENTRY_SHARE = 64
    ENTRY_BYTES = 150  # per entry besides its two strings: the tuple, the count, the dict's slot and link

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._forms: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()  # filled from the loop, read from planning threads

    def get(self, name: str) -> tuple[str, int] | None:
        with self._lock:
            found = self._forms.get(name)
            if found is not None:
                self._forms.move_to_end(name)
            return found

    def put(self, name: str, form: tuple[str, int]) -> None:
        size = self._bytes(name, form)
        if size > self.max_bytes // self.ENTRY_SHARE:
            return
        with self._lock:
            if name in self._forms:
                return
            self._forms[name] = form
            self.used += size
            while self.used > self.max_bytes:
                old_name, old = self._forms.popitem(last=False)
                self.used -= self._bytes(old_name, old)

    def _bytes(self, name: str, form: tuple[str, int]) -> int:
        """What an entry holds in memory, as measured (a character is 1 to 4 bytes)."""
        return sys.getsizeof(name) + sys.getsizeof(form[0]) + self.ENTRY_BYTES
