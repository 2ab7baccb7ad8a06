"""Long-context task generators: RULER (niah_*, vt, cwe, fwe), BABILong (qa1..qa5), Hash-Hop (1..6 hops).

Every generator is a pure function ``(task, length_tokens, seed) -> Sample``: seeded, offline, and fast
enough to build 1M-token samples in a few seconds. Use :func:`generate` with a name from :data:`TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.tasks import babilong, hashhop, ruler_niah, ruler_vt, ruler_words
from bench.tasks.sample import FAMILIES, Sample

Generator = Callable[[str, int, int], Sample]

TASKS: dict[str, Generator] = {
    **{name: ruler_niah.generate for name in ruler_niah.CONFIGS},
    "vt": ruler_vt.generate,
    "cwe": ruler_words.generate_cwe,
    "fwe": ruler_words.generate_fwe,
    **{
        f"babilong_{q}": (
            lambda task, length, seed: babilong.generate(task.removeprefix("babilong_"), length, seed)
        )
        for q in babilong.FAMILY
    },
    **{f"hashhop_{h}": hashhop.generate for h in range(1, 7)},
}

# Families are fixed per task (no need to build a sample to know them).
FAMILY: dict[str, str] = {
    **{name: "single" for name in ruler_niah.CONFIGS},
    "vt": "multi",
    "cwe": "global",
    "fwe": "global",
    **{f"babilong_{q}": fam for q, fam in babilong.FAMILY.items()},
    **{f"hashhop_{h}": "single" if h == 1 else "multi" for h in range(1, 7)},
}


def generate(task: str, length: int, seed: int = 0) -> Sample:
    """Build one sample of `task` about `length` cl100k tokens long."""
    sample = TASKS[task](task, length, seed)
    sample.task = task
    return sample


__all__ = ["FAMILIES", "FAMILY", "TASKS", "Sample", "generate"]
