"""``mixpr-gateway --config config.yaml --host 127.0.0.1 --port 4000`` (also ``python -m gateway``)."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import logging
import os
import sys
from typing import Any

from gateway.config import ConfigError, load_config
from gateway.edge.exposure import check_bind
from gateway.starting import START_FAILED, Starting, build_app

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mixpr-gateway", description=__doc__)
    parser.add_argument("--config", default=os.environ.get("MIXPR_CONFIG", "config.yaml"),
                        help="path to config.yaml (default: $MIXPR_CONFIG or ./config.yaml)")
    parser.add_argument("--host", default=os.environ.get("MIXPR_HOST", "127.0.0.1"),
                        help="address to bind (default 127.0.0.1; use 0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("MIXPR_PORT", "4000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("MIXPR_WORKERS", "1")),
                        help="server processes (default 1); each has its own MixPR pool and router cache")
    parser.add_argument("--timeout-keep-alive", type=float, default=75.0,
                        help="seconds an idle client connection stays open (default 75: longer than "
                             "load balancers' idle timeouts, so they never reuse a closing connection)")
    parser.add_argument("--log-level", default=os.environ.get("MIXPR_LOG_LEVEL", "info"),
                        choices=["critical", "error", "warning", "info", "debug"])
    return parser.parse_args(argv)


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's settings. uvloop and httptools (``uvicorn[standard]``) are named rather than left to
    uvicorn's "auto", so a build without them says so instead of quietly serving slower (issue 23)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if (loop, http) != ("uvloop", "httptools"):
        logging.getLogger("gateway").warning("uvloop or httptools is not installed: serving with %s and "
                                             "%s, which cost more per request", loop, http)
    # The access log would be the only per-request line with client details; ours has no text.
    return {"host": args.host, "port": args.port, "log_level": args.log_level, "access_log": False,
            "timeout_keep_alive": args.timeout_keep_alive, "loop": loop, "http": http}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    try:
        config = load_config(args.config)
        check_bind(config, args.host)
    except ConfigError as exc:
        print(f"mixpr-gateway: {exc}", file=sys.stderr)
        return 2
    if args.workers > 1 and any(m.managed_server for m in config.model_list):
        print("mixpr-gateway: --workers > 1 cannot be used with a managed_server model "
              "(every worker would start it on the same port)", file=sys.stderr)
        return 2
    import uvicorn

    options = server_options(args)
    if args.workers == 1:
        # Listening at once; the gateway is imported and built behind it (gateway.starting, issue 59).
        # If that fails, the server stops and the exit code says so, as when the build came first.
        app = Starting(functools.partial(build_app, config, args.host),
                       stop=lambda: setattr(server, "should_exit", True))
        server = uvicorn.Server(uvicorn.Config(app, **options))
        server.run()
        return START_FAILED if app.failure or not server.started else 0
    # Several processes use every core for the HTTP and LiteLLM work; they share no state, so
    # this is the same as several instances behind a load balancer, on one port.
    os.environ["MIXPR_CONFIG"] = os.path.abspath(args.config)
    os.environ["MIXPR_HOST"] = args.host
    uvicorn.run("gateway.starting:app_from_env", factory=True, workers=args.workers, **options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
