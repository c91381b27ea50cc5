"""Argument parsing and printing for ``seeder verify`` and ``seeder compare``.

Exit codes: 0 PASS (compare: finished), 1 FAIL (compare: a difference with
``--fail-on-difference``), 2 bad usage, 3 a run failed (its log tail is printed),
4 INCOMPLETE (a check could not run and ``--allow-skip`` was not given), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar, Union

from seeder.verify._contract import TEMPLATE_NAMES, Contract, default_command, split_command
from seeder.verify._runner import RunFailed, log_tail
from seeder.verify._verdict import EXIT_CODES

if TYPE_CHECKING:  # the session (and scipy behind it) loads when a command runs
    from seeder.verify._plan import SessionConfig

_Config = TypeVar("_Config", bound="SessionConfig")

__all__ = [
    "add_verify",
    "add_compare",
    "EXIT_FAIL",
    "EXIT_RUN_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INTERRUPTED",
]

EXIT_FAIL, EXIT_USAGE, EXIT_RUN_FAILED, EXIT_INCOMPLETE, EXIT_INTERRUPTED = (
    1,
    2,
    3,
    EXIT_CODES["INCOMPLETE"],
    130,
)

#: Arguments given to the bundled example on top of the contract (its defaults are already small).
EXAMPLE_ARGS: list[str] = []
#: Default --jobs: two runs at once where there are two cores (run 3 still waits for run 2).
DEFAULT_JOBS = min(2, os.cpu_count() or 1)

_CONTRACT_HELP = (
    "pass the script a flag of its own for one of verify's requests, NAME=TEMPLATE, repeatable "
    "(e.g. --arg resume='--resume {ckpt_dir}/checkpoint.pt'). Names: "
    + ", ".join(TEMPLATE_NAMES)
    + ", metrics_env, step_key, loss_keys (comma-separated). Without --arg, the script's parser "
    "says which of "
    + ", ".join(sorted({getattr(Contract(), n).split()[0] for n in TEMPLATE_NAMES}))
    + " it takes; the rest goes through seeder's environment variables. An empty TEMPLATE: never "
    "pass it."
)


#: ``seeder verify --help``: what the tool does, one paragraph a string, wrapped when shown.
_VERIFY_PARAGRAPHS = (
    "Run a training script that uses seeder (no flags of verify's needed) as: (1) seeded, "
    "uninterrupted; (2) seeded, stopped at an epoch boundary with a checkpoint, and (3) resumed "
    "from it; (2b) seeded, stopped inside an epoch, and (3b) resumed from it; (4) unseeded; each "
    "repeated. Then decide: PASS (every check ran and passed), FAIL, or INCOMPLETE (a check could "
    "not run).",
    "The script runs only as these runs, each in its own folder under --out that mirrors the "
    "current folder for reading. Its flags come from its own argument parser, read by running it "
    "up to that parser (it stops there, or at its first optimizer step: nothing trains). Where it "
    "takes no flag for a request, seeder does it inside the run through $SEEDER_SEED, "
    "$SEEDER_STOP_AFTER_STEP and $SEEDER_RESUME (seeder.Checkpoint, SeederCallback, SeederTrainer "
    "stop and resume it).",
    "Exit status: 0 PASS, 1 FAIL, 2 usage error, 3 a run failed, 4 INCOMPLETE, 130 interrupted.",
)
_VERIFY_DESCRIPTION = "\n\n".join(textwrap.fill(p, 100) for p in _VERIFY_PARAGRAPHS)


def _common(p: argparse.ArgumentParser, out: str, epochs: int) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default=Path(out),
        help=f"output directory (default ./{out}; a previous seeder "
        "output there is replaced, any other non-empty directory is refused)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=epochs,
        metavar="X",
        help=f"epochs of a full run (default {epochs}), "
        "passed as --epochs X to a script whose parser takes it; another runs its own number",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=42,
        help="master seed of the seeded runs (default 42): --seed, or "
        "$SEEDER_SEED for a script that takes no --seed",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=DEFAULT_JOBS,
        help=f"runs at once (default {DEFAULT_JOBS}); each gets CPUs/jobs threads unless "
        f"OMP_NUM_THREADS is set",
    )
    p.add_argument(
        "--arg", action="append", default=[], metavar="NAME=TEMPLATE", help=_CONTRACT_HELP
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail a run that takes longer",
    )
    p.add_argument(
        "--include-secret-files",
        action="store_true",
        help="copy dotfiles and credential files (.env, .netrc, secrets.yaml, *.pem) of the "
        "current folder into the runs' folders too (default: left out, named in the report)",
    )
    p.add_argument(
        "--keep-going", action="store_true", help="after a failed run, finish the others anyway"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    fig = p.add_mutually_exclusive_group()
    fig.add_argument(
        "--figures",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the PNG figures here (default: --out)",
    )
    fig.add_argument(
        "--no-figures", action="store_true", help="skip the figures (no matplotlib needed)"
    )
    p.add_argument(
        "train_command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="training command after --, e.g. -- python train.py --lr 0.1. Default: the bundled "
        "examples/train.py; after -- an argument list that starts with an option goes to it "
        "(-- --samples 512)",
    )


def _contract(pairs: list[str]) -> Contract:
    overrides = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--arg expects NAME=TEMPLATE, got {pair!r}")
        overrides[name.strip()] = value
    return Contract().with_overrides(overrides)


def _command(words: list[str]) -> list[str]:
    """The training command; none, or one that starts with an option, means the bundled example
    (with those options)."""
    if words and words[0] == "--":
        words = words[1:]
    if not words or words[0].startswith("-"):
        return default_command() + EXAMPLE_ARGS + words
    return split_command(words)


def _common_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return dict(
        command=_command(args.train_command),
        out=args.out,
        epochs=args.epochs,
        seed=args.seed,
        contract=_contract(args.arg),
        jobs=args.jobs,
        keep_going=args.keep_going,
        timeout=args.timeout,
        progress=not args.no_progress,
        figures=False if args.no_figures else (args.figures or True),
        include_secret_files=args.include_secret_files,
    )


def _reproducible_failed(report: dict[str, Any]) -> bool:
    return any(
        c["name"] == "reproducible" and c["status"] == "FAIL" for c in report.get("checks", [])
    )


def _report_failure(exc: RunFailed, out: Path) -> int:
    for r in exc.failed:
        print(f"\nrun {r.name} failed: {r.reason}", file=sys.stderr)
        tail = log_tail(r.log)
        print(
            f"--- last lines of {r.log}\n{tail}\n---" if tail else f"(its log {r.log} is empty)",
            file=sys.stderr,
        )
    others = [r for r in exc.results if r.status in ("skipped", "cancelled")]
    if others:
        print(
            f"{len(others)} other run(s) not finished: " + ", ".join(r.name for r in others),
            file=sys.stderr,
        )
    print(
        f"no verdict: {len(exc.failed)} run(s) failed; details in {out / 'report.json'}",
        file=sys.stderr,
    )
    return EXIT_RUN_FAILED


def _lacks_plot_extra(command: str, args: argparse.Namespace) -> bool:
    """Say, before anything runs, which packages of the ``plot`` extra ``command`` needs and
    lacks."""
    import importlib.util

    wanted = ["scipy"] + ([] if args.no_figures else ["matplotlib"])
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"seeder {command} needs {' and '.join(missing)}, which this Python lacks: "
            "pip install 'seeder[plot]'"
            + ("" if "scipy" in missing else " (or pass --no-figures)"),
            file=sys.stderr,
        )
    return bool(missing)


def _run(fn: Callable[[_Config], dict[str, Any]], cfg: _Config) -> Union[dict[str, Any], int]:
    """The report, or the exit code when a run failed or the session was interrupted."""
    try:
        return fn(cfg)
    except RunFailed as exc:
        return _report_failure(exc, cfg.out)
    except KeyboardInterrupt:
        print(
            "\ninterrupted: every run was stopped; partial output in " + str(cfg.out),
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def add_verify(sub: argparse._SubParsersAction) -> None:
    """Register ``seeder verify``."""
    p = sub.add_parser(
        "verify",
        help="prove that a training command is seeded and resumes bit for bit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_VERIFY_DESCRIPTION,
    )
    _common(p, "seeder-verify", 4)
    p.add_argument(
        "--repeats", "-r", type=int, default=3, help="repeats of the runs (default 3, at least 2)"
    )
    p.add_argument(
        "--resume-repeats",
        type=int,
        default=None,
        metavar="N",
        help="repeats of the stopped and resumed runs (2), (3), (2b), (3b) (default: --repeats; "
        "from 1 to --repeats): each repeat fewer is 4 runs fewer (2 with --no-mid-epoch)",
    )
    mid = p.add_mutually_exclusive_group()
    mid.add_argument(
        "--stop-after-steps",
        type=int,
        default=None,
        metavar="S",
        help="stop the mid-epoch run (2b) after global step S, an optimizer step (default: the odd "
        "step nearest the middle of the epoch after the first half's last, from run (1)'s "
        "records)",
    )
    mid.add_argument(
        "--no-mid-epoch",
        action="store_true",
        help="leave out the mid-epoch stop (runs 2b and 3b); "
        "its check is then SKIP without making the verdict INCOMPLETE",
    )
    p.add_argument(
        "--allow-skip",
        action="store_true",
        help="a check that cannot run is SKIP and the verdict still "
        "PASS when the others pass (default: the verdict is INCOMPLETE, exit status 4)",
    )
    p.add_argument(
        "--atol",
        type=float,
        default=0.0,
        help="accept loss differences up to this (default 0: bit for bit)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the variance test (default 0.05)",
    )
    p.add_argument(
        "--ignore-output",
        action="append",
        default=[],
        metavar="GLOB",
        help="a file the runs write that differs by design (a log with times), as a pattern on "
        "its path in the run's folder (e.g. 'logs/*.txt'): left out of the comparison of the "
        "runs' files and named in the report (repeatable)",
    )
    p.add_argument(
        "--locate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when the reproducible check fails, name the first operation or input that parts "
        "the seeded runs (seeder locate: two more runs up to the first differing step, in "
        "OUT/locate; default); --no-locate skips it",
    )

    def run(args: argparse.Namespace) -> int:
        if _lacks_plot_extra("verify", args):
            return EXIT_USAGE
        from seeder.verify import _report as rep
        from seeder.verify._plan import VerifyConfig
        from seeder.verify._session import verify

        cfg = VerifyConfig(
            repeats=args.repeats,
            resume_repeats=args.resume_repeats,
            stop_after_steps=args.stop_after_steps,
            atol=args.atol,
            alpha=args.alpha,
            mid_epoch=not args.no_mid_epoch,
            allow_skip=args.allow_skip,
            ignore_output=tuple(args.ignore_output),
            **_common_kwargs(args),
        )
        result = _run(verify, cfg)
        if isinstance(result, int):
            return result
        print(rep.table(result))
        if _reproducible_failed(result):  # seeder locate: its lines after the table
            if args.locate:
                from seeder.verify._locate import locate_after_verify

                lines = locate_after_verify(result, Path(cfg.out), timeout=cfg.timeout)
                print(
                    "\nfirst difference (seeder locate):"
                    + "".join(f"\n  - {line}" for line in lines)
                )
            else:
                print(
                    "\nthe seeded runs differ: seeder locate -- COMMAND (or seeder verify without "
                    "--no-locate) names the first operation or input that parts them"
                )
        print(f"report: {Path(cfg.out) / 'report.md'}")
        return EXIT_CODES.get(result["verdict"], EXIT_FAIL)

    p.set_defaults(func=run)


def add_compare(sub: argparse._SubParsersAction) -> None:
    """Register ``seeder compare``."""
    p = sub.add_parser(
        "compare",
        help="A/B-compare two configurations with paired seeds",
        description="Train configuration A and B with the same seeds and give confidence intervals "
        "for the paired loss difference B - A, and how many unseeded runs would "
        "match them.",
    )
    _common(p, "seeder-compare", 3)
    p.add_argument(
        "--a",
        dest="a_args",
        default="",
        metavar="ARGS",
        help="arguments appended for configuration A (one string)",
    )
    p.add_argument(
        "--b",
        dest="b_args",
        default="",
        metavar="ARGS",
        help="arguments appended for configuration B (one string)",
    )
    p.add_argument(
        "--runs", "-n", type=int, default=5, help="seeds, i.e. runs per configuration (default 5)"
    )
    p.add_argument(
        "--fail-on-difference", action="store_true", help="exit 1 when B differs from A (for CI)"
    )

    def run(args: argparse.Namespace) -> int:
        if _lacks_plot_extra("compare", args):
            return EXIT_USAGE
        from seeder.verify import _report as rep
        from seeder.verify._plan import CompareConfig
        from seeder.verify._session import compare

        cfg = CompareConfig(
            a_args=shlex.split(args.a_args),
            b_args=shlex.split(args.b_args),
            runs=args.runs,
            **_common_kwargs(args),
        )
        result = _run(compare, cfg)
        if isinstance(result, int):
            return result
        print(rep.table(result))
        print(f"report: {Path(cfg.out) / 'report.md'}")
        return EXIT_FAIL if (args.fail_on_difference and result["differs"]) else 0

    p.set_defaults(func=run)
