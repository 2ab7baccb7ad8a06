"""``mixpr-gateway --config config.yaml --host 127.0.0.1 --port 4000`` (also ``python -m gateway``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from gateway.config import ConfigError, load_config

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mixpr-gateway", description=__doc__)
    parser.add_argument("--config", default=os.environ.get("MIXPR_CONFIG", "config.yaml"),
                        help="path to config.yaml (default: $MIXPR_CONFIG or ./config.yaml)")
    parser.add_argument("--host", default=os.environ.get("MIXPR_HOST", "127.0.0.1"),
                        help="address to bind (default 127.0.0.1; use 0.0.0.0 in a container)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("MIXPR_PORT", "4000")))
    parser.add_argument("--log-level", default=os.environ.get("MIXPR_LOG_LEVEL", "info"),
                        choices=["critical", "error", "warning", "info", "debug"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"mixpr-gateway: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from gateway.app import create_app

    # One process per instance: scale out with more instances behind a load balancer (the
    # gateway keeps no state that must be shared), not uvicorn workers.
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level=args.log_level,
                access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
