"""What the gateway saved, per model and over time, kept across restarts for the operator's page.

``record`` holds what one request adds (figures, and a row of the bounded per-request record, never
a prompt's text), ``recorder`` writes them off the request path, ``store`` keeps them (SQLite, or
Redis shared by replicas), ``figures`` turns what is kept into the numbers ``/stats`` and ``/ui`` show.
"""
