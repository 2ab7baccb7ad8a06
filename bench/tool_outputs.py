"""First-sight compression of coding-agent tool outputs (issue #22, item 2).

    .venv/bin/python -m bench.tool_outputs                 # the table below (~2 min on one core)
    .venv/bin/python -m bench.tool_outputs --kind code     # force one content kind
    .venv/bin/python -m bench.tool_outputs --settings 4000:0.4 4000:code=0.6,log=0.3,grep=0.3,other=0.5
    .venv/bin/python -m bench.tool_outputs --by-kind       # also each kind's rows beside head+tail

Data: ``../shared/data/real/agent_traj.dev.jsonl`` (definitions in its README). Every ``tool`` message
is compressed once, as the gateway would when it first arrives: the query is the tool call's name and
arguments, the assistant text that made the call and the task (the first user message); a ``path``
argument of the call is passed as the source hint. Outputs over ``threshold`` characters are cut to
``ratio`` of their tokens; smaller ones pass whole. A ratio per kind (``code=0.6,log=0.3,other=0.5``)
is looked up with the kind ``mixpr.kinds.resolve`` detects (what a gateway would do). Per setting:

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
from collections.abc import Iterator
from dataclasses import dataclass, field

from bench.data import data_dir
from mixpr.engine import compress
from mixpr.kinds import resolve
from mixpr.tokens import count_tokens

# One ratio for all kinds (beside today's sentences), then a ratio per kind: on the dev runs file
# views held 0.55 strict evidence entries per 1k tokens of outputs over 4,000 chars, test logs and
# grep/find listings 0.11-0.12, so listings and logs are cut harder and code views less.
DEFAULT_SETTINGS = (
    (2000, {"other": 0.25}),
    (4000, {"other": 0.4}),
    (6000, {"other": 0.3}),
    (4000, {"code": 0.6, "log": 0.3, "grep": 0.3, "other": 0.5}),
    (4000, {"code": 0.7, "log": 0.2, "grep": 0.2, "other": 0.5}),
    (4000, {"code": 0.7, "log": 0.25, "grep": 0.25, "other": 0.6}),
)
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
                by_index[entry["msg"]].evidence.append((entry["text"], _strict(entry, k)))
    return list(by_index.values())


def _strict(entry: dict, k: int) -> bool:
    """Only an earlier tool output (not the newest) held it, and the agent never repeated it."""
    return entry["origin"] == "tool" and not entry["in_prior_assistant"] and entry["msg"] < k - 1


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


def sentences(item: Output, threshold: int, ratios: dict[str, float]) -> str:
    """Today's compress(): the query after a blank line, pinned; the output's kept spans joined."""
    text = item.text
    if len(text) <= threshold:
        return text
    joined = text + "\n\n" + item.query
    budget = _budget(text, ratios.get("prose", ratios["other"])) + count_tokens(item.query)
    result = compress(joined, budget_tokens=budget, route="local", query_span=(len(text) + 2, len(joined)))
    parts = [text[s : min(e, len(text))] for s, e in result.spans if s < len(text)]
    return "\n".join(parts)


def kinds(item: Output, threshold: int, ratios: dict[str, float], kind: str) -> str:
    text = item.text
    if len(text) <= threshold:
        return text
    found = resolve(text, kind)
    budget = _budget(text, ratios.get(found, ratios["other"]))
    return compress(text, budget_tokens=budget, kind=found, query=item.query, source=item.source).text


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
        return f"{name:<64} {share:>7.3f} {evidence:>9.3f} {strict:>7.3f} {self.seconds:>8.1f}"


def by_kind(items: list[Output], threshold: int, ratios: dict[str, float], kind: str) -> Iterator[str]:
    """The same setting per detected kind, over the outputs it cuts only, beside head+tail on them."""
    groups: dict[str, list[Output]] = {}
    for item in items:
        if len(item.text) > threshold:
            groups.setdefault(resolve(item.text, kind), []).append(item)
    for found, group in sorted(groups.items()):
        ratio = ratios.get(found, ratios["other"])
        name = f"  {found} ({len(group)} outputs) @ {ratio}"
        yield _run(name, group, lambda it, r=ratios: kinds(it, threshold, r, kind)).row(name)
        yield _run("", group, head_tail).row("    head+tail on them")


def rows(items: list[Output], settings, kind: str, methods, *, per_kind: bool = False) -> Iterator[str]:
    yield f"{'setting':<64} {'tokens':>7} {'evidence':>9} {'strict':>7} {'seconds':>8}"
    yield _run("head+tail 4000 (2000 + 2000)", items, head_tail).row("head+tail 4000 (2000 + 2000)")
    for threshold, ratios in settings:
        shown = ",".join(f"{k}={v}" for k, v in ratios.items()) if len(ratios) > 1 else str(ratios["other"])
        if "sentences" in methods and len(ratios) == 1:
            name = f"sentences >{threshold} @ {shown}"
            yield _run(name, items, lambda it, t=threshold, r=ratios: sentences(it, t, r)).row(name)
        if "kinds" in methods:
            name = f"kinds({kind}) >{threshold} @ {shown}"
            yield _run(name, items, lambda it, t=threshold, r=ratios: kinds(it, t, r, kind)).row(name)
            if per_kind:
                yield from by_kind(items, threshold, ratios, kind)


def _run(name: str, items: list[Output], form_of) -> Tally:
    tally = Tally()
    started = time.perf_counter()
    for item in items:
        tally.add(item, form_of(item))
    tally.seconds = time.perf_counter() - started
    return tally


def _setting(value: str) -> tuple[int, dict[str, float]]:
    """``4000:0.4`` (one ratio) or ``4000:code=0.6,log=0.3,other=0.5`` (a ratio per kind)."""
    threshold, ratios = value.split(":")
    if "=" not in ratios:
        return int(threshold), {"other": float(ratios)}
    pairs = dict(pair.split("=") for pair in ratios.split(","))
    return int(threshold), {"other": 0.5, **{k: float(v) for k, v in pairs.items()}}


def main(argv: list[str] | None = None) -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--settings", nargs="*", type=_setting, default=list(DEFAULT_SETTINGS))
    parser.add_argument("--kind", default="auto")
    parser.add_argument("--methods", nargs="*", default=["sentences", "kinds"])
    parser.add_argument("--by-kind", action="store_true", help="also a row per detected kind")
    args = parser.parse_args(argv)
    items = outputs(load())
    strict = sum(s for item in items for _, s in item.evidence)
    entries = sum(len(item.evidence) for item in items)
    print(f"{len(items)} tool outputs, {entries} evidence entries ({strict} strict)")
    for line in rows(items, args.settings, args.kind, args.methods, per_kind=args.by_kind):
        print(line, flush=True)


if __name__ == "__main__":
    main()
