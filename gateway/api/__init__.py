"""One module per wire format: each turns its request into a ``ChatCall`` and the reply back.

``common`` holds what every format shares at the edge: auth, body reading, per-request switches.
"""
