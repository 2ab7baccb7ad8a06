"""The operator's page: ``/ui`` (a login, then the figures) and ``/stats`` (the same figures as JSON),
read from ``gateway.stats``, never on the request path."""
