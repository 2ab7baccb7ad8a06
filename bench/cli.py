"""Command-line helpers shared by the benches: token sizes like 4k/1M and task selections."""

from __future__ import annotations

from bench.tasks import FAMILY, TASKS

_SUFFIX = {"k": 1024, "m": 1024**2}
GROUPS = {
    "ruler": [t for t in TASKS if t.startswith("niah") or t in ("vt", "cwe", "fwe")],
    "babilong": [t for t in TASKS if t.startswith("babilong")],
    "hashhop": [t for t in TASKS if t.startswith("hashhop")],
    **{fam: [t for t in TASKS if FAMILY[t] == fam] for fam in ("single", "multi", "global")},
    "all": list(TASKS),
}


def parse_size(text: str) -> int:
    """'4k' -> 4096, '1M' -> 1048576 (binary units, like RULER's 4096..131072), '5000' -> 5000."""
    text = text.strip().lower()
    if text[-1] in _SUFFIX:
        return round(float(text[:-1]) * _SUFFIX[text[-1]])
    return int(text)


def format_size(n: int) -> str:
    for suffix, unit in (("M", 1024**2), ("k", 1024)):
        if n >= unit and n % (unit // 4) == 0:
            value = n / unit
            return f"{value:g}{suffix}"
    return str(n)


def parse_tasks(text: str) -> list[str]:
    """Comma-separated task and/or group names (ruler, babilong, hashhop, single, multi, global, all)."""
    out: list[str] = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        if item not in GROUPS and item not in TASKS:
            raise SystemExit(
                f"unknown task or group {item!r}; tasks: {', '.join(TASKS)}; groups: {', '.join(GROUPS)}"
            )
        out += [t for t in GROUPS.get(item, [item]) if t not in out]
    return out
