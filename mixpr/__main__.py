"""``python -m mixpr compress``: compress a file (or stdin) to stdout, stats as one JSON line on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mixpr.engine import METHODS, ROUTES, compress


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; a script reading stderr wants one line."""

    def error(self, message: str):
        self.exit(2, f"mixpr: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m mixpr", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)
    run = commands.add_parser("compress", help="keep the chunks that answer the text's final question")
    size = run.add_mutually_exclusive_group()
    size.add_argument("--budget-tokens", type=_positive, default=4000, help="token budget (default 4000)")
    size.add_argument("--top-k", type=_positive, help="keep this many chunks instead of a token budget")
    run.add_argument("--route", choices=ROUTES, default="auto", help="auto = heuristic here (no LLM)")
    run.add_argument("--method", choices=METHODS, default="mixpr")
    run.add_argument("--model", default=None, help="model name that picks the tiktoken encoding")
    run.add_argument(
        "--query", default=None, help="the question, given apart from the text: appended after a blank line"
    )
    run.add_argument("file", nargs="?", default="-", help="text file, or - for stdin (default)")
    return parser


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def read_text(name: str) -> str:
    """The input as text; raises ValueError with a one-line reason."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text (bad byte at offset {exc.start})") from exc


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        text = read_text(args.file)
    except ValueError as exc:
        print(f"mixpr: error: {exc}", file=sys.stderr)
        return 1
    query_span = None
    if args.query and args.query.strip():
        text = f"{text.rstrip()}\n\n{args.query.strip()}"
        query_span = (len(text) - len(args.query.strip()), len(text))
    result = compress(
        text,
        query_span=query_span,
        budget_tokens=args.budget_tokens,
        top_k=args.top_k,
        route=args.route,
        method=args.method,
        model=args.model,
    )
    sys.stdout.write(result.text)
    sys.stdout.flush()
    print(json.dumps(result.stats), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
