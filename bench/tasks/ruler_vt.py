"""RULER variable tracking (vt): one 4-hop chain of VAR assignments in noise, with its one-shot example."""

from __future__ import annotations

import random
import string

from bench.tasks.haystacks import NOISE_LINE
from bench.tasks.prompt import assemble
from bench.tasks.sample import Sample, fit_to_length

HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
TAIL = "\nQuestion: Find all variables that are assigned the value {query} in the text above."
ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are "
    "assigned the value {query}, they are: "
)
NUM_HOPS = 4
TOKENS_TO_GENERATE = 30
EXAMPLE_NOISE_LINES = 18  # with the template this makes the ~500-token example RULER uses


def _names(rng: random.Random, n: int, size: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        if (name := "".join(rng.choices(string.ascii_uppercase, k=size))) not in names:
            names.append(name)
    return names


def _chain(names: list[str], value: int) -> list[str]:
    # Hop statements keep RULER's trailing space.
    return [f"VAR {names[0]} = {value}"] + [
        f"VAR {b} = VAR {a} " for a, b in zip(names, names[1:], strict=False)
    ]


def _context(n_lines: int, chain: list[str], rng: random.Random) -> str:
    """Chain statements become their own lines at sorted random positions, kept in chain order."""
    lines = [NOISE_LINE] * n_lines
    for j, pos in enumerate(sorted(rng.sample(range(n_lines + 1), len(chain)))):
        lines.insert(pos + j, chain[j])
    return "\n".join(lines)


def _example(rng: random.Random) -> str:
    names, value = _names(rng, NUM_HOPS + 1, 3), rng.randrange(10000, 99999)
    context = _context(EXAMPLE_NOISE_LINES, _chain(names, value), rng)
    tail = (TAIL + ANSWER_PREFIX).format(query=value, num_v=len(names))
    return HEAD + context + tail + " " + " ".join(names) + "\n"


def generate(task: str, length: int, seed: int) -> Sample:
    rng = random.Random(seed)
    example = _example(rng)
    names, value = _names(rng, NUM_HOPS + 1, 5), rng.randrange(10000, 99999)
    chain = _chain(names, value)
    tail = (TAIL + ANSWER_PREFIX).format(query=value, num_v=len(names))

    def build(n: int) -> Sample:
        context = _context(n, chain, random.Random(f"{task}/{seed}/haystack"))
        # Needles drop RULER's trailing space, so a chunk cut at the line end still counts.
        return assemble(
            example + HEAD,
            context,
            tail,
            needles=[s.strip() for s in chain],
            family="multi",
            task=task,
            length=length,
            seed=seed,
        )

    target = length - TOKENS_TO_GENERATE
    return fit_to_length(build, target, target // 21)
