"""Imported by the compression pool's fork server (``gateway.run.workers``) when a model asks the auto
router: LiteLLM and what its first call imports (``gateway.upstream.warm``), so each worker forked
after asks its first routing question with all of it loaded."""

import gc

from gateway.upstream.warm import first_call

first_call()
gc.freeze()  # LiteLLM too, as gateway.compress.preload freezes what it loads


def in_worker(models: tuple[str, ...]) -> None:
    """The first call again, in a worker just forked (what it touches is the fork server's, and the
    first touch of each page copies it), and one for each model the router asks (``models``), whose
    own lookups (its price, its provider's settings) the first routing question paid for."""
    first_call(models)
