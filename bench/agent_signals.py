"""Which signals predict that a line of a long tool output is used later (issue #34): a table.

    .venv/bin/python -m bench.agents --signals          # the whole dev split (or: -m bench.agent_signals)

Population: the non-blank lines of every tool output over 4,000 characters in the agent runs. Label:
the line holds (overlaps the span of) a strict-evidence string, an entry of a later step ``k`` with
``msg`` that output, ``msg < k - 1``, origin ``tool`` and not ``in_prior_assistant``. Per signal: the
share of lines with it and without it that are used, the lift (used with it / used overall) and its
recall (the share of all used lines that have it), on the whole split and on each half (runs at even
and odd line indices of the file). Signals:

* position: the line starts in the first 2,000 characters, ends in the last 2,000, or neither (middle);
* the agent's own later mentions: an identifier-like word of the line (4 characters or more) occurs in
  the next 3 assistant messages' text or call arguments. It reads the future as seen from the output
  (the step that uses a line may be one of those three), so a second row counts only uses after them;
* the producing tool's name, and the output's content kind (``kinds.resolve(text, "auto")``);
* overlap with the task (an identifier of the first user message) and with the producing call's arguments;
* error lines (error, exception, traceback, fail, assert);
* files later edited: a path or file name in the line that a later call's arguments name;
* MixPR's own pick: ``mixpr.compress(output, budget_tokens=1000, kind="auto", query=<call name and
  arguments, the assistant's words, the task>, source=<the call's path argument>)`` keeps >= 90% of the
  line's characters (the query as ``gateway.conversation.forms`` builds it).

A second table gives recency: for every tool output (any length) and every later step that could use
it strictly, by the age of that step in steps since the output was first sent (1 = the first request
that held it): the strict uses at that age, and the share of (output, step) pairs with a strict use.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import mixpr.engine
from bench.agents import Trajectory, is_strict, message_text, trajectories
from mixpr import kinds

LONG = 4000  # outputs over this many characters (head+tail's threshold)
EDGE = 2000  # the first and last characters head+tail keeps
MENTION_WINDOW = 3  # the next assistant messages whose words count as the agent's own mentions
PICK_BUDGET = 1000  # MixPR's pick: the tokens it may keep of one output
KEPT = 0.9  # a line MixPR keeps: this share of its characters inside Compressed.spans
AGES = ((1, 2), (3, 5), (6, 10), (11, 20), (21, None))

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_ERROR = re.compile(r"error|exception|traceback|fail|assert", re.IGNORECASE)
_PATH = re.compile(r"(?:[\w.-]*/)+[\w.-]+|\b[\w-]+\.[A-Za-z]{1,5}\b")
_NEWLINE = re.compile(r"[^\n]*\n?")


@dataclass(frozen=True)
class Line:
    half: str  # "even" or "odd": the run's line index in the file
    used: bool  # holds a strict-evidence string of a later step
    used_late: bool  # ... of a step after the next MENTION_WINDOW assistant messages
    signals: frozenset[str]


def _idents(text: str) -> set[str]:
    return set(_IDENT.findall(text))


def _lines(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of each non-blank line of ``text`` (end before its newline)."""
    for m in _NEWLINE.finditer(text):
        line = m.group().rstrip("\n")
        if line.strip():
            yield m.start(), m.start() + len(line)


def _covered(start: int, end: int, spans: list[tuple[int, int]]) -> float:
    inside = sum(max(0, min(end, e) - max(start, s)) for s, e in spans)
    return inside / max(1, end - start)


def _calls(run: Trajectory) -> dict[str, tuple[str, str, str]]:
    """Each tool call's id: its function name, arguments, and the words of the message that made it."""
    out = {}
    for m in run.messages:
        for call in m.get("tool_calls") or []:
            function = call.get("function") or {}
            out[call.get("id", "")] = (function.get("name", ""), function.get("arguments") or "",
                                       m.get("content") if isinstance(m.get("content"), str) else "")
    return out


def _source(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        return None
    path = parsed.get("path") or parsed.get("file_path") if isinstance(parsed, dict) else None
    return path if isinstance(path, str) else None


def _later_arguments(run: Trajectory, after: int) -> str:
    return "\n".join((call.get("function") or {}).get("arguments") or "" for m in run.messages[after + 1:]
                     for call in m.get("tool_calls") or [])


def _named_later(line: str, later: str) -> bool:
    """A path or file name in ``line`` that a later call's arguments name."""
    for path in _PATH.findall(line):
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if ("/" in path and len(path) >= 4 and path in later) or ("." in base and len(base) >= 4
                                                                  and base in later):
            return True
    return False


def run_lines(run: Trajectory) -> Iterator[Line]:
    """Every non-blank line of the run's long tool outputs, labelled, with its signals."""
    half = "odd" if run.index % 2 else "even"
    uses: dict[int, list[tuple[int, int, int]]] = {}
    for k, entries in run.evidence.items():
        for e in entries:
            if is_strict(e, k):
                uses.setdefault(e["msg"], []).append((k, e["start"], e["end"]))
    task = next((message_text(m) for m in run.messages if m["role"] == "user"), "")
    task_words = _idents(task)
    calls = _calls(run)
    assistants = [i for i, m in enumerate(run.messages) if m["role"] == "assistant"]
    for i, m in enumerate(run.messages):
        text = m.get("content")
        if m["role"] != "tool" or not isinstance(text, str) or len(text) <= LONG:
            continue
        name, arguments, said = calls.get(m.get("tool_call_id") or "", ("", "", ""))
        nxt = [a for a in assistants if a > i][:MENTION_WINDOW]
        mentioned = set().union(*(_idents(message_text(run.messages[a])) for a in nxt)) if nxt else set()
        horizon = nxt[-1] if len(nxt) == MENTION_WINDOW else len(run.messages)
        later = _later_arguments(run, i)
        query = "\n".join((f"{name} {arguments}", said, task))
        picked = mixpr.engine.compress(text, budget_tokens=PICK_BUDGET, kind="auto", query=query,
                                source=_source(arguments)).spans
        fixed = {f"tool: {name or '?'}", f"kind: {kinds.resolve(text, 'auto')}"}
        call_words = _idents(arguments)
        mine = uses.get(i, [])
        for start, end in _lines(text):
            line = text[start:end]
            words = _idents(line)
            hits = [k for k, s, e in mine if s < end and e > start]
            signals = set(fixed)
            signals.add("position: first 2,000 chars" if start < EDGE else
                        "position: last 2,000 chars" if end > len(text) - EDGE else "position: middle")
            flags = {"agent mentions a word of it in its next 3 messages": bool(words & mentioned),
                     "shares an identifier with the task": bool(words & task_words),
                     "shares an identifier with the call's arguments": bool(words & call_words),
                     "error line": bool(_ERROR.search(line)),
                     "names a file a later call names": _named_later(line, later),
                     "MixPR keeps it (1,000 tokens)": _covered(start, end, picked) >= KEPT}
            signals |= {s for s, on in flags.items() if on}
            if start < EDGE or end > len(text) - EDGE or flags["MixPR keeps it (1,000 tokens)"]:
                signals.add("head+tail or MixPR keeps it")
            yield Line(half, bool(hits), any(k > horizon for k in hits), frozenset(signals))


def recency(runs: list[Trajectory]) -> dict[str, dict[str, list[int]]]:
    """Per half and age bucket: [strict uses, (output, step) pairs with a use, (output, step) pairs]."""
    out: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        half = "odd" if run.index % 2 else "even"
        steps = run.steps
        used: dict[tuple[int, int], int] = Counter()
        for k, entries in run.evidence.items():
            for e in entries:
                if is_strict(e, k):
                    used[(e["msg"], k)] += 1
        for i, m in enumerate(run.messages):
            if m["role"] != "tool":
                continue
            age = 0
            for k in steps:
                if k <= i:
                    continue
                age += 1
                if i >= k - 1:
                    continue  # the newest output: no strict use possible
                row = out.setdefault(half, {}).setdefault(_bucket(age), [0, 0, 0])
                row[0] += used.get((i, k), 0)
                row[1] += (i, k) in used
                row[2] += 1
    return out


def _bucket(age: int) -> str:
    for low, high in AGES:
        if high is None or age <= high:
            return f"{low}-{high} steps" if high else f">{low - 1} steps"
    raise AssertionError(age)


# -- the tables ---------------------------------------------------------------------------------


def _stats(lines: list[Line], signal: str, late: bool = False) -> tuple[float, float, float, float, float]:
    """Share with the signal, used with it, used without it, lift, recall."""
    label = (lambda x: x.used_late) if late else (lambda x: x.used)
    on = [x for x in lines if signal in x.signals]
    off_used = sum(label(x) for x in lines) - sum(label(x) for x in on)
    total_used = sum(label(x) for x in lines)
    base = total_used / len(lines) if lines else float("nan")
    with_ = sum(label(x) for x in on) / len(on) if on else float("nan")
    without = off_used / (len(lines) - len(on)) if len(lines) > len(on) else float("nan")
    recall = sum(label(x) for x in on) / total_used if total_used else float("nan")
    return len(on) / max(1, len(lines)), with_, without, with_ / base if base else float("nan"), recall


def signals_table(lines: list[Line], min_share: float = 0.01) -> str:
    names = Counter(s for x in lines for s in x.signals)
    order = sorted(names, key=lambda s: (s.split(":")[0] in ("tool", "kind"), s))
    halves = {h: [x for x in lines if x.half == h] for h in ("even", "odd")}
    rows = ["| signal | lines with it | used, with | used, without | lift | recall | even: lift / recall | "
            "odd: lift / recall |", "|---|---|---|---|---|---|---|---|"]
    for signal in order:
        if names[signal] < min_share * len(lines):
            continue
        for late in (False, True) if signal.startswith("agent mentions") else (False,):
            share, with_, without, lift, recall = _stats(lines, signal, late)
            cells = [f"{_stats(halves[h], signal, late)[3]:.2f} / {_stats(halves[h], signal, late)[4]:.2f}"
                     for h in halves]
            label = signal + (" (uses after those 3 only)" if late else "")
            rows.append(f"| {label} | {share:.3f} | {with_:.4f} | {without:.4f} | {lift:.2f} | "
                        f"{recall:.2f} | {cells[0]} | {cells[1]} |")
    used = {h: sum(x.used for x in half) for h, half in halves.items()}
    return "\n".join(rows) + (
        f"\n\n{len(lines)} non-blank lines of tool outputs over {LONG:,} chars, {sum(used.values())} used "
        f"strictly later (base rate {sum(used.values()) / max(1, len(lines)):.4f}; even {used['even']} of "
        f"{len(halves['even'])}, odd {used['odd']} of {len(halves['odd'])}); lift = used with the signal / "
        f"base rate; recall = share of all used lines with the signal; signals on under {min_share:.0%} of "
        "lines left out")


def recency_table(ages: dict[str, dict[str, list[int]]]) -> str:
    rows = ["| age of the step (steps since the output was first sent) | strict uses | share of uses | "
            "(output, step) pairs with a use | even: uses / pairs with a use | "
            "odd: uses / pairs with a use |",
            "|---|---|---|---|---|---|"]
    buckets = [_bucket(low) for low, _ in AGES]
    total = sum(row[0] for half in ages.values() for row in half.values())
    for b in buckets:
        per = {h: ages.get(h, {}).get(b, [0, 0, 0]) for h in ("even", "odd")}
        uses, hit, pairs = (sum(per[h][j] for h in per) for j in range(3))
        cells = [f"{per[h][0]} / {per[h][1] / max(1, per[h][2]):.3f}" for h in per]
        rows.append(f"| {b} | {uses} | {uses / max(1, total):.2f} | {hit / max(1, pairs):.3f} "
                    f"({hit} of {pairs}) | {cells[0]} | {cells[1]} |")
    return "\n".join(rows) + ("\n\nEvery tool output, every later step that could use it strictly (not the "
                              "newest message); age 1 = the first request that held it.")


def report(runs: list[Trajectory]) -> str:
    lines = [x for run in runs for x in run_lines(run)]
    return signals_table(lines) + "\n\n" + recency_table(recency(runs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, help="only the first N runs of the file")
    args = parser.parse_args(argv)
    runs = trajectories()
    print(report(runs[: args.limit] if args.limit else runs))


if __name__ == "__main__":
    main()
