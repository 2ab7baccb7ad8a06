"""Imported by the compression pool's fork server (``gateway.run.workers``), once, before it forks
the first worker: what every worker's warm-up loads (the tokenizers, MixPR, scikit-learn), so each
worker starts from it in milliseconds instead of importing it itself (issue 59). Imported anywhere
else it only loads them early."""

import contextlib
import gc

from gateway.compress.warm_up import load_tables

# Anything but an ImportError raised here would stop the fork server, and every worker start with it;
# a worker's own warm-up loads what this could not and says why.
with contextlib.suppress(Exception):
    load_tables()
# Out of the collector's reach in every worker forked from here (``gateway.compress.compressor._warm_up``
# says why); not collected first, which would take 0.3 s of the start for little garbage.
gc.freeze()
