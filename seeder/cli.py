"""The ``seeder`` command (also ``python -m seeder``).

Each subcommand is one ``_add_<name>(subparsers)`` function that registers a
parser whose ``func`` takes the parsed arguments and returns an exit code.

Example:
    >>> main(["derive", "--seed", "42", "--task", "1", "--epoch", "3"])  # doctest: +ELLIPSIS
    7196025296689398411
    0
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import derive

__all__ = ["main", "build_parser"]


def _add_derive(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("derive", help="print a derived seed", description="Print the seed seeder derives for a key.")
    p.add_argument("--seed", type=int, required=True, help="master seed")
    p.add_argument("--task", type=int, default=0, help="task id (0 = init, 1 = training, ...)")
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--rank", type=int, default=0, help="global rank")
    p.add_argument("--domain", default="rank", choices=[d.name.lower() for d in derive.Domain])
    p.add_argument("--stream", type=int, default=0, help="stream (generator number, worker id, pipeline id)")

    def run(args: argparse.Namespace) -> int:
        domain = derive.Domain[args.domain.upper()]
        rank = 0 if domain in (derive.Domain.SHARED, derive.Domain.SAMPLER) else args.rank
        print(derive.derive_seed(args.seed, domain, args.task, args.epoch, rank, args.stream))
        return 0

    p.set_defaults(func=run)


def _add_verify(sub: "argparse._SubParsersAction") -> None:
    from .verify.cli import add_verify

    add_verify(sub)


def _add_compare(sub: "argparse._SubParsersAction") -> None:
    from .verify.cli import add_compare

    add_compare(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="seeder", description="Reproducible, resumable PyTorch training runs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_derive, _add_verify, _add_compare):
        add(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except (ValueError, TypeError, RuntimeError, OSError) as exc:
        print(f"seeder {args.command}: error: {exc}", file=sys.stderr)
        return 2
