"""SIGKILL at 12 points of a training run, during steps and inside checkpoint writes: the resume is
exact.

Each segment is a fresh interpreter (``tests/scripts/train_faults.py``: examples/train.py with fault
hooks; forked from the session's server only where ``SEEDER_TEST_FORKSERVER=1`` opts in, locally;
the uninterrupted reference forks from it in CI too); each resumes from the last checkpoint and
SIGKILLs itself at the next planned point (after a step, or after writing a fraction of a
checkpoint's bytes, 100% meaning before the rename). The points come from ``SEEDER_FAULT_SEED``
(a fixed default, so CI is stable). The last segment runs to the end. Every segment records its
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


def plan(seed: int) -> list[list]:
    """One kill per step 1..12: after the step, or inside the write of its checkpoint (a random
    fraction)."""
    rng = random.Random(seed)
    points = []
    for step in range(1, STEPS + 1):
        if rng.random() < 0.5:
            points.append(["--fault-kill-at", str(step)])
        else:
            fraction = rng.choice([0.0, 0.01, 0.3, 0.5, 0.9, 0.999, 1.0])
            points.append(
                ["--fault-ckpt-kill-at", str(step), "--fault-ckpt-kill-fraction", str(fraction)]
            )
    return points


def test_sigkill_at_twelve_points_of_training_and_checkpoint_writing_resumes_exactly(
    tmp_path, scripts
):
    seed = int(os.environ.get("SEEDER_FAULT_SEED", "20261123"))
    kills = plan(seed)
    run = ["--ckpt-dir", str(tmp_path / "ckpt"), "--resume"]
    segments = [
        hooks + BASE + run + ["--workers", "2" if i in (3, 8) else "0"]
        for i, hooks in enumerate(kills)
    ]
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
