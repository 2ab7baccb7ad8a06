"""Token counts remembered by content hash: a conversation's history repeats every message, so
each text is counted once, here or on another replica (through the shared form store)."""

from __future__ import annotations

import asyncio
import hashlib

from gateway.conversation.shared_forms import FormStore
from mixpr.tokens import count_tokens


def counts(store: FormStore, texts: list[str], model: str, loop: asyncio.AbstractEventLoop) -> list[int]:
    """Tokens of each of ``texts`` for ``model``; every count at once (one look-up in the shared cache)."""
    names = ["n" + hashlib.blake2b(f"{model}\x00{text}".encode("utf-8", "surrogatepass"),
                                   digest_size=20).hexdigest() for text in texts]
    known = store.found(names, loop)
    computed: dict[str, tuple[str, int]] = {}
    for name, text in zip(names, texts, strict=True):
        if name not in known and name not in computed:
            computed[name] = ("", count_tokens(text, model) if text else 0)
    store.keep(computed, loop)
    return [(known.get(name) or computed[name])[1] for name in names]
