"""SIGKILL in each window of a training run, between steps and inside checkpoint writes: the resume
is exact.

Each segment is a fresh interpreter (``tests/scripts/train_faults.py``: examples/train.py with fault
hooks; forked from the session's server only where ``SEEDER_TEST_FORKSERVER=1`` opts in, locally;
the uninterrupted reference forks from it in CI too); each resumes from the last checkpoint and
SIGKILLs itself at the next planned point. One point per window a kill can land in: right after an
optimizer step (its record written, its checkpoint not) with no DataLoader workers and with two
alive, and inside a checkpoint's write before any byte, after a fraction of them, and after all of
them before the rename. ``SEEDER_FAULT_SEED`` (a fixed default, so CI is stable) orders the windows
and draws their steps and the fraction. The last segment runs to the end. Every segment records its
steps in one ``$SEEDER_STEPS`` file, as under ``seeder verify``: each step's record (redone ones
included) and the final digests must equal an uninterrupted run's.
"""

from __future__ import annotations

import os
import random
import signal

import pytest
from faultkit import TALLY
from helpers import step_records

pytestmark = pytest.mark.slow

FAULTS = "tests/scripts/train_faults.py"

SEED = "20240601"
BASE = [
    "--samples",
    "128",
    "--batch-size",
    "32",
    "--seed",
    SEED,
    "--epochs",
    "3",
    "--ckpt-every-steps",
    "1",
]
STEPS = 12  # 3 epochs x 4 steps


#: Where a kill can land: (hook, workers). After a step, with and without worker processes; inside
#: the write of a checkpoint before any byte (0.0), after part of them (None: a fraction drawn) and
#: after every byte, before the rename (1.0).
WINDOWS = [("step", 0), ("step", 2), ("ckpt", 0.0), ("ckpt", None), ("ckpt", 1.0)]


def plan(seed: int) -> list[list[str]]:
    """One kill per window, in an order and at steps (ascending, 1..12) drawn from ``seed``: each
    point's hooks and ``--workers``."""
    rng = random.Random(seed)
    windows = rng.sample(WINDOWS, len(WINDOWS))
    steps = sorted(rng.sample(range(1, STEPS + 1), len(WINDOWS)))
    points = []
    for (kind, value), step in zip(windows, steps):
        if kind == "step":
            points.append(["--fault-kill-at", str(step), "--workers", str(value)])
        else:
            fraction = rng.choice([0.01, 0.3, 0.5, 0.9, 0.999]) if value is None else value
            points.append(
                ["--fault-ckpt-kill-at", str(step), "--fault-ckpt-kill-fraction", str(fraction)]
                + ["--workers", "0"]
            )
    return points


def test_sigkill_in_each_window_of_training_and_checkpoint_writing_resumes_exactly(
    tmp_path, scripts
):
    seed = int(os.environ.get("SEEDER_FAULT_SEED", "20261123"))
    kills = plan(seed)
    run = ["--ckpt-dir", str(tmp_path / "ckpt"), "--resume"]
    segments = [hooks + BASE + run for hooks in kills]
    segments.append(BASE + run + ["--workers", "2"])  # the last resume, to the end
    segments.append(
        BASE + ["--ckpt-dir", str(tmp_path / "ref"), "--workers", "0"]
    )  # the same run, never killed
    steps, ref = tmp_path / "steps.jsonl", tmp_path / "ref.jsonl"
    note = f"kill plan {kills} (SEEDER_FAULT_SEED={seed} repeats it)"
    # The resume in a new process is the subject: each segment a fresh interpreter (a server only by
    # the local opt-in); the reference, never killed, forks from the session's server.
    runs = [
        scripts.run(
            [FAULTS, *segment],
            timeout=120,
            check=False,
            env={"SEEDER_STEPS": str(ref if segment is segments[-1] else steps)},
            start_is_subject=segment is not segments[-1],
        )
        for segment in segments
    ]
    ended = [run.returncode for run in runs]
    assert ended == [-signal.SIGKILL] * len(kills) + [0, 0], (
        f"{note}\n{runs[-1].stdout[-3000:]}{runs[-1].stderr[-3000:]}"
    )
    printed = [
        line.split()[-1]
        for run in runs
        for line in run.stdout.splitlines()
        if line.startswith("trained ")
    ]
    assert len(printed) == 2 and printed[0] == printed[1], note
    got, got_digests = step_records(steps)
    want, want_digests = step_records(ref)
    assert [r["step"] for r in want] == list(range(1, STEPS + 1))
    assert got == want, note  # every step's record, the redone ones equal too (step_records checks)
    assert got_digests == want_digests, note  # one digest at exit: the killed runs wrote none
    assert not list(
        (tmp_path / "ckpt").glob(".last.pt.*.tmp")
    )  # the halves of killed writes are removed
    TALLY["faults", "exact"] += len(kills)
