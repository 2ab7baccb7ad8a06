"""First-sight compression of coding-agent tool outputs (issue #22, item 2).

    .venv/bin/python -m bench.tool_outputs                 # the table below (~2 min on one core)
    .venv/bin/python -m bench.tool_outputs --kind code     # force one content kind
    .venv/bin/python -m bench.tool_outputs --settings 4000:0.4 2000:0.5

Data: ``../shared/data/real/agent_traj.dev.jsonl`` (definitions in its README). Every ``tool`` message
is compressed once, as the gateway would when it first arrives: the query is the tool call's name and
arguments, the assistant text that made the call and the task (the first user message); a ``path``
argument of the call is passed as the source hint. Outputs over ``threshold`` characters are cut to
``ratio`` of their tokens; smaller ones pass whole. Per setting:

* tokens: kept tokens of all tool outputs / their original tokens (cl100k);
* evidence: share of the steps' evidence entries whose ``text`` is still in the compressed form of the
  tool message at the entry's ``msg`` index (every step's entries count, as in ``bench/agents.py``);
* strict: the same over entries with ``origin == "tool"``, not ``in_prior_assistant`` and ``msg < k-1``.

Rows: ``head+tail`` (outputs over 4,000 chars keep their first and last 2,000, the Codex baseline),
``sentences`` (today's ``compress()``, the query appended after a blank line and pinned, as issue #22
measured) and ``kinds`` (``compress(kind=...)``, the content-type chunkers).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from bench.data import data_dir
from mixpr import compress
from mixpr.tokens import count_tokens

DEFAULT_SETTINGS = ((4000, 0.4), (2000, 0.5), (2000, 0.35), (6000, 0.3))
HEAD_TAIL = 2000


@dataclass
class Output:
    """One tool message: its text, what asked for it, and the evidence later steps drew from it."""

    text: str
    query: str
    source: str | None
    evidence: list[tuple[str, bool]] = field(default_factory=list)  # (text, strict)


def load(path=None) -> list[dict]:
    path = path or data_dir() / "real" / "agent_traj.dev.jsonl"
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def outputs(trajectories: list[dict]) -> list[Output]:
    found = []
    for trajectory in trajectories:
        found += _outputs(trajectory)
    return found


def _outputs(trajectory: dict) -> list[Output]:
    messages = trajectory["messages"]
    task = next((m["content"] for m in messages if m["role"] == "user"), "") or ""
    by_index: dict[int, Output] = {}
    calls: dict[str, tuple[dict, str]] = {}
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            for call in message.get("tool_calls") or ():
                calls[call["id"]] = (call["function"], message.get("content") or "")
        elif message["role"] == "tool":
            function, said = calls.get(message.get("tool_call_id"), ({"name": "", "arguments": ""}, ""))
            query = "\n".join((f"{function['name']} {function['arguments']}", said, task))
            by_index[index] = Output(message["content"] or "", query, _path_argument(function["arguments"]))
    for step in trajectory["steps"]:
        k = step["msg_index"]
        for entry in step["evidence"]:
            if entry["msg"] in by_index:
                strict = entry["origin"] == "tool" and not entry["in_prior_assistant"] and entry["msg"] < k - 1
                by_index[entry["msg"]].evidence.append((entry["text"], strict))
    return list(by_index.values())


def _path_argument(arguments: str) -> str | None:
    """A ``path`` argument of the call (an editor's file), the caller's hint of the output's source."""
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    path = parsed.get("path") if isinstance(parsed, dict) else None
    return path if isinstance(path, str) else None


def head_tail(item: Output, threshold: int = 2 * HEAD_TAIL) -> str:
    text = item.text
    return text if len(text) <= threshold else text[:HEAD_TAIL] + "\n…\n" + text[-HEAD_TAIL:]


def sentences(item: Output, threshold: int, ratio: float) -> str:
    """Today's compress(): the query after a blank line, pinned; the output's kept spans joined."""
    text = item.text
    if len(text) <= threshold:
        return text
    joined = text + "\n\n" + item.query
    budget = _budget(text, ratio) + count_tokens(item.query)
    result = compress(joined, budget_tokens=budget, route="local", query_span=(len(text) + 2, len(joined)))
    parts = [text[s : min(e, len(text))] for s, e in result.spans if s < len(text)]
    return "\n".join(parts)


def kinds(item: Output, threshold: int, ratio: float, kind: str) -> str:
    text = item.text
    if len(text) <= threshold:
        return text
    result = compress(
        text, budget_tokens=_budget(text, ratio), kind=kind, query=item.query, source=item.source
    )
    return result.text


def _budget(text: str, ratio: float) -> int:
    return max(1, math.floor(ratio * count_tokens(text)))


@dataclass
class Tally:
    tokens: int = 0
    original: int = 0
    kept: list[int] = field(default_factory=lambda: [0, 0])  # all, strict
    total: list[int] = field(default_factory=lambda: [0, 0])
    seconds: float = 0.0

    def add(self, item: Output, form: str) -> None:
        self.tokens += count_tokens(form)
        self.original += count_tokens(item.text)
        for text, strict in item.evidence:
            present = text in form
            self.kept[0] += present
            self.total[0] += 1
            self.kept[1] += present and strict
            self.total[1] += strict

    def row(self, name: str) -> str:
        share = self.tokens / max(1, self.original)
        evidence = self.kept[0] / max(1, self.total[0])
        strict = self.kept[1] / max(1, self.total[1])
        return f"{name:<34} {share:>7.3f} {evidence:>9.3f} {strict:>7.3f} {self.seconds:>8.1f}"


def rows(items: list[Output], settings, kind: str, methods) -> Iterator[str]:
    yield f"{'setting':<34} {'tokens':>7} {'evidence':>9} {'strict':>7} {'seconds':>8}"
    yield _run("head+tail 4000 (2000 + 2000)", items, head_tail).row("head+tail 4000 (2000 + 2000)")
    for threshold, ratio in settings:
        if "sentences" in methods:
            name = f"sentences >{threshold} @ {ratio}"
            yield _run(name, items, lambda it, t=threshold, r=ratio: sentences(it, t, r)).row(name)
        if "kinds" in methods:
            name = f"kinds({kind}) >{threshold} @ {ratio}"
            yield _run(name, items, lambda it, t=threshold, r=ratio: kinds(it, t, r, kind)).row(name)


def _run(name: str, items: list[Output], form_of) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for item in items:
        tally.add(item, form_of(item))
    tally.seconds = time.perf_counter() - started
    return tally


def _setting(value: str) -> tuple[int, float]:
    threshold, ratio = value.split(":")
    return int(threshold), float(ratio)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", nargs="*", type=_setting, default=list(DEFAULT_SETTINGS))
    parser.add_argument("--kind", default="auto")
    parser.add_argument("--methods", nargs="*", default=["sentences", "kinds"])
    args = parser.parse_args(argv)
    items = outputs(load())
    strict = sum(s for item in items for _, s in item.evidence)
    print(f"{len(items)} tool outputs, {sum(len(i.evidence) for i in items)} evidence entries ({strict} strict)")
    for line in rows(items, args.settings, args.kind, args.methods):
        print(line, flush=True)


if __name__ == "__main__":
    main()
