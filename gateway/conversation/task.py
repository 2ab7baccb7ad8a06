"""What a reset keeps the older messages for: the task in the user's own words, and what the agent
is doing now.

Agent clients send their own text as user messages too: Codex its environment context and the
project's AGENTS.md, Claude Code its ``<system-reminder>`` blocks. Those name every file and rule of
the project, so as a query they would favour nothing in particular; they are left out. A long user
message (a pasted document) counts by its question, its last paragraph. What the agent is doing now
is its latest words and tool calls up to the reset point. The query is a pure function of the
messages up to that point, so every instance builds the same one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from gateway.compress import messages as shape
from gateway.conversation import forms, json_values

# Whole blocks a client adds to a user message around (or instead of) what the user wrote: their
# opening tags (each block ends at its tag's first closing after it: ``without_boilerplate``).
BOILERPLATE = re.compile(r"<(environment_context|system-reminder|INSTRUCTIONS|user_instructions)>")
# A user message that is only a client's project instructions (Codex: AGENTS.md).
INSTRUCTIONS = re.compile(r"\A\s*# AGENTS\.md instructions for ")
LONG_CHARS = 16_000  # a user message longer than this (a pasted document) counts by its question
RECENT = 2  # the agent's latest assistant messages: what it is doing now
# What a user names that a tool call can name too: a file (``f3.txt``, ``src/parser.py``), a path, an
# identifier with an underscore, a dot or inner capitals (``parse_value``, ``Table.join``, ``readCsv``).
# Words are split first and each is matched whole: linear in the text, whatever it holds.
_WORDS = re.compile(r"[^\s,;:()\[\]{}<>\"'`*!?=]+")
_FILE = re.compile(r"[\w./-]*\w\.[A-Za-z]\w{0,9}")
_IDENTIFIER = re.compile(r"[A-Za-z]\w*(?:_\w*|[a-z][A-Z]\w*)")
NAMED_MIN_CHARS = 4


def query(messages: Sequence[dict[str, Any]], i: int) -> str:
    """The query of a reset at ``i``: the user's words, then the agent's latest words and calls (reads
    ``0..i`` only). Tool results are not in it: they are what the cut ranks."""
    said = [user_words(m) for j, m in enumerate(messages[: i + 1])
            if m.get("role") == "user" and not shape.observation(messages, j)]
    agent = [agent_words(m) for m in messages[: i + 1] if m.get("role") == "assistant"][-RECENT:]
    return "\n\n".join(text for text in [*said, *agent] if text)


def named(messages: Sequence[dict[str, Any]], i: int) -> frozenset[str]:
    """The files, paths and identifiers the user's own words name up to ``i`` (a path by its file
    name too: a tool call may give it whole or from another folder)."""
    found: set[str] = set()
    for j, message in enumerate(messages[: i + 1]):
        if message.get("role") == "user" and not shape.observation(messages, j):
            found |= {n for n in words(user_words(message))
                      if _FILE.fullmatch(n) or "/" in n or _IDENTIFIER.fullmatch(n)}
    return frozenset(found)


def words(text: str) -> set[str]:
    """Every word of ``text`` that could be a name, and of a path its file name too."""
    found: set[str] = set()
    for word in _WORDS.findall(text):
        name = word.strip(".-/")
        found |= {n for n in (name, name.rsplit("/", 1)[-1]) if len(n) >= NAMED_MIN_CHARS}
    return found


def user_words(message: dict[str, Any]) -> str:
    """A user message's own text: without a client's boilerplate; a pasted document by its question."""
    text = without_boilerplate(shape.text(message)).strip()
    if INSTRUCTIONS.match(text):
        return ""
    return forms.split_question(text)[1] if len(text) > LONG_CHARS else text


def without_boilerplate(text: str) -> str:
    """``text`` without a client's whole blocks (an opening tag to the first closing of that tag).

    Linear in the text: a regular expression ``<(tag)>.*?</\\1>`` rescans to the end for every
    opening that is never closed (a megabyte of them held a replica's GIL for minutes); here each
    tag's closing is looked for once past every block removed, and never again once it is missing.
    """
    kept: list[str] = []
    start = search = 0
    unclosed: set[str] = set()  # tags with no closing after the search point: none later either
    while (opening := BOILERPLATE.search(text, search)) is not None:
        tag = opening.group(1)
        close = -1 if tag in unclosed else text.find(f"</{tag}>", opening.end())
        if close < 0:
            unclosed.add(tag)
            search = opening.end()
            continue
        kept.append(text[start:opening.start()])
        start = search = close + len(tag) + 3
    kept.append(text[start:])
    return "".join(kept)


def agent_words(message: dict[str, Any]) -> str:
    """An assistant message's text and its tool calls (names and arguments)."""
    calls = [shape.function(c) for c in shape.calls(message)]
    said = [f"{f.get('name', '')} {_arguments(f.get('arguments'))}" for f in calls]
    return "\n".join(text for text in [shape.text(message), *said] if text)


def _arguments(arguments: Any) -> str:
    """Arguments as the agent wrote them: JSON strings unescaped (a path, a command)."""
    try:  # nesting deeper than the interpreter's stack ("[" * 100_000) is read as plain text
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        return " ".join(_strings(parsed)) if not isinstance(parsed, str) else parsed
    except (ValueError, RecursionError):
        return str(arguments)


def _strings(value: Any) -> list[str]:
    return [str(leaf) for leaf in json_values.leaves(value) if leaf is not None]

