"""Imported by the compression pool's fork server (``gateway.run.workers``) when a model asks the auto
router: LiteLLM and what its first call imports (``gateway.upstream.warm``), so each worker forked
after asks its first routing question with all of it loaded. Each worker calls this module's
``first_call`` again after its fork, with the router's models (``compressor._warm_up``)."""

import gc

from gateway.upstream.warm import first_call

first_call()
gc.freeze()  # LiteLLM too, as gateway.compress.preload freezes what it loads

