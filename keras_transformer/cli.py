"""`keras-transformer train | translate | export | evaluate | demo`: a thin command line.

Each subcommand only parses flags and calls library functions.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, export, translate with and evaluate Transformer translators.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    # Each subcommand registers itself here: add_<name>_parser(subparsers).
    del subparsers
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
