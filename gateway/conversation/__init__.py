"""Which bytes a conversation sends, cache-stable from one request to the next: each message's form at
first sight, a follow-up's evidence, rare resets within the room, the replicas' form cache, the report.
One prompt's compression is ``gateway.compress``, which this package imports (never the reverse)."""
