"""Every test under ``tests/``: the process's HTTP clients share their TLS context (``tests/tls.py``)."""

from tests import tls

tls.share()
