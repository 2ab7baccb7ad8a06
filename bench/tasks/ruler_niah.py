"""RULER needle-in-a-haystack tasks (niah_single_*, niah_multikey_*, niah_multivalue, niah_multiquery)."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from bench.tasks.haystacks import essay_text, insert_at_depths, needle_context, noise_context
from bench.tasks.prompt import assemble
from bench.tasks.sample import Sample, fit_to_length
from bench.tasks.words import adjective_noun
from bench.text import join_and

TEMPLATE_HEAD = (
    "Some special magic {type_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_v} afterwards.\n"
)
TEMPLATE_TAIL = (
    "\nWhat are all the special magic {type_v} for {query} mentioned in the provided text?"
    " The special magic {type_v} for {query} mentioned in the provided text are"
)
NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
TOKENS_TO_GENERATE = 128
TOKENS_PER_UNIT = {"noise": 21, "essay": 1.3, "needle": 18}  # first guesses only; fitting measures


@dataclass(frozen=True)
class NiahConfig:
    haystack: str  # "noise" | "essay" | "needle"
    key_type: str  # "words" | "uuids"
    value_type: str  # "numbers" | "uuids"
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1


CONFIGS = {
    "niah_single_1": NiahConfig("noise", "words", "numbers"),
    "niah_single_2": NiahConfig("essay", "words", "numbers"),
    "niah_single_3": NiahConfig("essay", "words", "uuids"),
    "niah_multikey_1": NiahConfig("essay", "words", "numbers", num_k=4),
    "niah_multikey_2": NiahConfig("needle", "words", "numbers"),
    "niah_multikey_3": NiahConfig("needle", "uuids", "uuids"),
    "niah_multivalue": NiahConfig("essay", "words", "numbers", num_v=4),
    "niah_multiquery": NiahConfig("essay", "words", "numbers", num_k=4, num_q=4),
}


def draw(kind: str, rng: random.Random) -> str:
    if kind == "numbers":
        return str(rng.randint(1000000, 9999999))
    if kind == "words":
        return adjective_noun(rng)
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _template(cfg: NiahConfig) -> tuple[str, str, str]:
    """Template head/tail with RULER's singular rewrite applied before filling (it never touches context)."""
    head, tail, type_v = TEMPLATE_HEAD, TEMPLATE_TAIL, cfg.value_type
    if cfg.num_q * cfg.num_v == 1:
        for old, new in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            head, tail = head.replace(old, new), tail.replace(old, new)
        type_v = type_v[:-1]
    return head, tail, type_v


def generate(task: str, length: int, seed: int) -> Sample:
    cfg = CONFIGS[task]
    rng = random.Random(seed)
    num_k = max(cfg.num_k, cfg.num_q)
    keys: list[str] = []
    while len(keys) < num_k:
        if (key := draw(cfg.key_type, rng)) not in keys:
            keys.append(key)
    values = {k: [draw(cfg.value_type, rng) for _ in range(cfg.num_v)] for k in keys}
    needles = [NEEDLE.format(type_v=cfg.value_type, key=k, value=v) for k in keys for v in values[k]]
    random.Random(42).shuffle(needles)
    queried = rng.sample(keys, cfg.num_q)
    wanted = [NEEDLE.format(type_v=cfg.value_type, key=k, value=v) for k in queried for v in values[k]]
    head, tail, type_v = _template(cfg)
    head = head.format(type_v=type_v)
    tail = tail.format(type_v=type_v, query=join_and(queried))

    def build(n: int) -> Sample:
        hay_rng = random.Random(f"{task}/{seed}/haystack")
        context = _context(cfg, n, needles, hay_rng, set(keys))
        return assemble(
            head, context, tail, needles=wanted, family="single", task=task, length=length, seed=seed
        )

    target = length - TOKENS_TO_GENERATE
    return fit_to_length(build, target, round(target / TOKENS_PER_UNIT[cfg.haystack]))


def _context(cfg: NiahConfig, n: int, needles: list[str], rng: random.Random, real_keys: set[str]) -> str:
    if cfg.haystack == "noise":
        return noise_context(n, needles, rng)
    if cfg.haystack == "essay":
        return insert_at_depths(essay_text(n), needles, rng)

    def distractor(r: random.Random) -> str:
        key = draw(cfg.key_type, r)
        while key in real_keys:  # a distractor with the queried key would make the answer ambiguous
            key = draw(cfg.key_type, r)
        return NEEDLE.format(type_v=cfg.value_type, key=key, value=draw(cfg.value_type, r))

    return needle_context(n, needles, rng, distractor)
