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
import json
import shlex
import sys
from typing import Optional

from seeder._seeding import derive

__all__ = ["main", "build_parser"]


def _integer(text: str) -> int:
    """An ``int`` option written in plain ASCII digits, as ``SEEDER_SEED`` is (a leading ``-``
    reaches the range check)."""
    body = text[1:] if text.startswith("-") else text
    try:
        value = derive.parse_decimal(body, "value")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an integer written in plain ASCII digits 0-9"
        ) from None
    return -value if body is not text else value


def _add_derive(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "derive",
        help="print a derived seed",
        description="Print the seed seeder derives for a key (master seed, domain, task, epoch, "
        "rank, stream): the same number on every machine and in every process.",
        epilog="example: seeder derive --seed 42 --task 1 --epoch 3 --rank 0",
    )
    p.add_argument("--seed", type=_integer, required=True, help="master seed")
    p.add_argument("--task", type=_integer, default=0, help="task id (0 = init, 1 = training, ...)")
    p.add_argument("--epoch", type=_integer, default=0, help="epoch (default 0)")
    p.add_argument(
        "--rank", type=_integer, default=0, help="global rank (ignored by shared and sampler)"
    )
    p.add_argument(
        "--domain",
        default="rank",
        choices=[d.name.lower() for d in derive.Domain],
        metavar="DOMAIN",
        help="what the seed is for: "
        + ", ".join(d.name.lower() for d in derive.Domain)
        + " (default rank)",
    )
    p.add_argument(
        "--stream",
        type=_integer,
        default=0,
        help="stream (generator number, worker id, pipeline id)",
    )

    def run(args: argparse.Namespace) -> int:
        domain = derive.Domain[args.domain.upper()]
        rank = 0 if domain in (derive.Domain.SHARED, derive.Domain.SAMPLER) else args.rank
        print(derive.derive_seed(args.seed, domain, args.task, args.epoch, rank, args.stream))
        return 0

    p.set_defaults(func=run)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a command with PYTHONHASHSEED, CUBLAS_WORKSPACE_CONFIG and SEEDER_SEED set",
        description="Start COMMAND with SEEDER_SEED, PYTHONHASHSEED (derived from the master seed) "
        "and CUBLAS_WORKSPACE_CONFIG set before its interpreter starts. Signals are "
        "passed on to it and its exit code is returned (128+N if it died of signal N; "
        "127 if it was not found). Works with torchrun as COMMAND. With $SEEDER_SNAPSHOT_DIR set, "
        "rank 0's seeder.init writes an environment snapshot there.",
        epilog="example: seeder run --seed 42 --deterministic -- torchrun --nproc-per-node 8 "
        "train.py",
    )
    p.add_argument(
        "--seed",
        type=_integer,
        default=None,
        help="master seed (default: $SEEDER_SEED, else drawn from OS entropy and printed)",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="also set SEEDER_DETERMINISTIC=1 (seeder.init enforces deterministic algorithms) and "
        "HOROVOD_FUSION_THRESHOLD=0",
    )
    p.add_argument(
        "--print-env",
        action="store_true",
        help='print the variables as shell `export` lines and exit (eval "$(seeder run --seed 42 '
        '--print-env)")',
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="do not print the variables on stderr before starting",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the command and its arguments",
    )

    def run(args: argparse.Namespace) -> int:
        from seeder.env._launcher import LAUNCH_VARIABLES, launch_environment, run_command

        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        env = launch_environment(args.seed, deterministic=args.deterministic)
        names = list(LAUNCH_VARIABLES)
        if env.get("SEEDER_SNAPSHOT_DIR"):  # rank 0's init takes it: the tools' hook
            from seeder._run.bootstrap import run_environment

            env = run_environment(env)
            names.append("PYTHONPATH")  # the hook's folder: --print-env's exports take it too
        exports = [(k, env[k]) for k in names if k in env]
        if args.print_env:
            if command:
                raise ValueError(
                    "--print-env prints the variables and runs nothing; drop the command or "
                    "the option"
                )
            for k, v in exports:
                print(f"export {k}={shlex.quote(v)}")
            return 0
        if not command:
            raise ValueError("no command given; usage: seeder run [--seed N] -- COMMAND [ARG ...]")
        if not args.quiet:
            print(
                "seeder run: " + " ".join(f"{k}={v}" for k, v in exports),
                file=sys.stderr,
                flush=True,
            )
        try:
            return run_command(command, env)
        except FileNotFoundError:
            print(f"seeder run: error: command not found: {command[0]}", file=sys.stderr)
            return 127
        except PermissionError:
            print(f"seeder run: error: permission denied: {command[0]}", file=sys.stderr)
            return 126

    p.set_defaults(func=run)


def _add_env(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "env",
        help="snapshot the software/system environment, or diff two snapshots",
        description="Snapshot the software and system environment, or compare two snapshots.",
    )
    env_sub = p.add_subparsers(dest="env_command", metavar="ENV_COMMAND")

    snap = env_sub.add_parser(
        "snapshot",
        help="write an environment snapshot",
        description="Write the environment variables (every name; the values of those that "
        "change numerics or the run, such as CUDA_*, NCCL_*, OMP_NUM_THREADS and PYTHONHASHSEED; "
        "secrets redacted), pip freeze, module list, the commit and changed files of the current "
        "repository and of editable installs (the diff text with --diff), dpkg and conda package "
        "lists, nvidia-smi, torch's build "
        "configuration, CPU, OS and Python into DIR (mode 0700), indexed by manifest.json. "
        "Prints DIR.",
    )
    snap.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="directory (default: ./repro/$SLURM_JOB_ID, or ./repro/local-<time>-<pid> "
        "outside SLURM)",
    )
    snap.add_argument("--force", action="store_true", help="overwrite a snapshot already in DIR")
    snap.add_argument(
        "--diff",
        action="store_true",
        help="also write the text of uncommitted changes (git.diff, editable/<name>.diff; "
        "redacted): by default only the changed files and the change's sha256 are recorded",
    )

    def run_snapshot(args: argparse.Namespace) -> int:
        from seeder.env._capture import capture_environment

        print(capture_environment(args.dir, overwrite=args.force, diff=args.diff))
        return 0

    snap.set_defaults(func=run_snapshot)

    diff = env_sub.add_parser(
        "diff",
        help="compare two snapshots (exit 0 equal, 1 different, 2 error)",
        description="Compare two snapshots: environment variables (those that change performance "
        "or numerics first), torch/CUDA/cuDNN/NCCL and driver, CPU/OS/Python, Python "
        "and dpkg packages, editable installs and git state. Exit code 0 when equal, 1 "
        "when different, 2 on error.",
    )
    diff.add_argument("a", help="first snapshot directory (or its manifest.json)")
    diff.add_argument("b", help="second snapshot directory (or its manifest.json)")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.add_argument("--wide", action="store_true", help="do not shorten long values in the table")
    diff.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also ignore variables matching PATTERN (fnmatch; repeatable)",
    )
    diff.add_argument(
        "--all",
        action="store_true",
        help="compare every variable, also those that differ in every run (SLURM_JOB_ID, "
        "SHLVL, ...)",
    )

    def run_diff(args: argparse.Namespace) -> int:
        from seeder.env._diff import DEFAULT_IGNORED_VARIABLES, diff_environments

        ignore = ([] if args.all else list(DEFAULT_IGNORED_VARIABLES)) + args.ignore
        result = diff_environments(args.a, args.b, ignore=ignore)
        if args.json:
            print(json.dumps(result.to_dict(), indent=2))
        else:
            sys.stdout.write(result.format(width=0 if args.wide else 44))
        return 0 if result.equal else 1

    diff.set_defaults(func=run_diff)

    def no_subcommand(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=no_subcommand)


def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="show the dataset indices of any batch from a checkpoint file",
        description="Questions about a run's data answered from its checkpoint file alone.",
    )
    data_sub = p.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    show = data_sub.add_parser(
        "show",
        help="print the dataset indices of batches of an epoch (exit 2 on a bad file or position)",
        description="Print the dataset indices of batch B (or batches FIRST-LAST, both included) "
        "of epoch E, computed from the loader state in CKPT (a seeder.Checkpoint file, or any "
        "torch.save'd dict holding seeder.state_dict() or loader.state_dict()) without building "
        "the dataset or importing training code; read with torch.load(weights_only=True). "
        "Batches the loader skips (loader.skip) are marked. An elastic loader's batch is a global "
        "step: its whole global batch, or --rank's part.",
        epilog="example: seeder data show ckpt/last.pt --epoch 3 --batch 1200-1210 --json",
    )
    show.add_argument("ckpt", metavar="CKPT", help="the checkpoint file")
    show.add_argument("--epoch", type=_integer, required=True, metavar="E", help="the epoch")
    show.add_argument(
        "--batch", required=True, metavar="B", help="a batch index B, or FIRST-LAST (both included)"
    )
    show.add_argument(
        "--rank",
        type=_integer,
        default=None,
        metavar="R",
        help="the rank whose part to show (default: the state's own rank; an elastic loader's "
        "whole global batch)",
    )
    show.add_argument(
        "--loader",
        default=None,
        metavar="KEY",
        help="which loader, when the file holds several (its key, e.g. loader.2)",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help='print one JSON line: {"epoch": E, "batch": B, "indices": [...], ...}; for a range, '
        '"batch" is [FIRST, LAST] and "indices" one list per batch',
    )

    def run_show(args: argparse.Namespace) -> int:
        from seeder.data._show import format_line, parse_batches, show

        first, last = parse_batches(args.batch)
        rows = show(args.ckpt, args.epoch, (first, last), rank=args.rank, loader=args.loader)
        if not args.json:
            print("\n".join(format_line(row) for row in rows))
            return 0
        skipped = [row["batch"] for row in rows if row["skipped"]]
        if first == last:
            out = {"epoch": args.epoch, "batch": first, "indices": rows[0]["indices"]}
            out.update(rank=rows[0]["rank"], skipped=bool(skipped))
        else:
            out = {"epoch": args.epoch, "batch": [first, last]}
            out.update(indices=[row["indices"] for row in rows], rank=rows[0]["rank"])
            out.update(skipped=skipped)
        print(json.dumps(out))
        return 0

    show.set_defaults(func=run_show)

    def no_subcommand(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=no_subcommand)


def _add_verify(sub: argparse._SubParsersAction) -> None:
    from seeder.verify._cli import add_verify

    add_verify(sub)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    from seeder.verify._cli import add_compare

    add_compare(sub)


def _add_locate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "locate",
        help="run a command twice with one seed; name the first operation or input that differs",
        description="Run COMMAND (a script that calls seeder.init) twice with the same master "
        "seed, find the first optimizer step whose parameters differ (or take --step), re-run "
        "both up to that step with a fingerprint of every tensor operation and batch, and name "
        "the first one that parts them: the operator, module, file and line, and the fix. "
        "Exit 0: the runs do not part (identical; with --step, up to the end of that step); "
        "1: they part (the lines say where, or that the recorder did not see it); 2: bad usage; "
        "3: a run failed.",
        epilog="example: seeder locate --seed 42 -- python train.py --epochs 1",
    )
    p.add_argument(
        "--seed",
        type=_integer,
        default=42,
        help="master seed of both runs (default 42, as $SEEDER_SEED)",
    )
    p.add_argument(
        "--step",
        type=_integer,
        default=None,
        metavar="S",
        help="the first optimizer step that differs, when known (default: found by two runs first)",
    )
    p.add_argument(
        "--out", default="seeder-locate", help="output directory (default ./seeder-locate)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail a run that takes longer",
    )
    p.add_argument(
        "--no-hash-check",
        action="store_true",
        help="do not re-run with a fixed PYTHONHASHSEED to test a set's or dict's order",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the command and its arguments",
    )

    def run(args: argparse.Namespace) -> int:
        from pathlib import Path

        from seeder.verify._locate import LocateConfig, locate
        from seeder.verify._runner import RunFailed, log_tail

        command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        cfg = LocateConfig(
            command=command,
            out=Path(args.out),
            seed=args.seed,
            step=args.step,
            timeout=args.timeout,
            hash_check=not args.no_hash_check,
        )
        try:
            report = locate(cfg)
        except RunFailed as exc:
            for r in exc.failed:
                print(
                    f"seeder locate: run {r.name} failed: {r.reason}\n{log_tail(r.log)}",
                    file=sys.stderr,
                )
            return 3
        except KeyboardInterrupt:
            print("\ninterrupted: every run was stopped", file=sys.stderr)
            return 130
        print("\n".join(report["lines"]))
        print(f"report: {Path(args.out) / 'report.md'}")
        return 1 if report.get("differs") else 0

    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seeder", description="Reproducible, resumable PyTorch training runs."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_derive, _add_run, _add_env, _add_data, _add_verify, _add_compare, _add_locate):
        add(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    from seeder.env._redact import redacted_output

    # what the tools print follows the rule of what they write (seeder.env._redact)
    with redacted_output([sys.argv if argv is None else ["seeder", *argv]]):
        return _main(argv)


def _main(argv: Optional[list[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except (ValueError, TypeError, RuntimeError, OSError) as exc:
        sub = getattr(args, "env_command", None) or getattr(args, "data_command", None)
        name = " ".join(filter(None, (args.command, sub)))
        print(f"seeder {name}: error: {exc}", file=sys.stderr)
        return 2
