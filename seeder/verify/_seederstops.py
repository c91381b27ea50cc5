"""Stops and resumes done by seeder inside the run, for a command that has no stop flags.

When the contract has neither ``stop_after_epochs`` nor ``stop_after_steps`` (the
command takes no such flag, :mod:`seeder.verify._flags`), run (1) of the first repeat goes
first; its per-step records give the epochs and their steps. Runs (2) and (2b) then get
``$SEEDER_STOP_AFTER_STEP``: the last step of epoch ``X // 2 - 1`` (an epoch boundary) and
the odd step nearest the middle of epoch ``max(1, X // 2 - 1)`` (never the first epoch).
An iteration-based run (fewer than two epochs: no ``seeder.reseed(1, epoch)`` per epoch,
``for iter_num in range(max_iters)``) stops at step ``N // 2`` of its ``N`` steps and at the
odd step nearest ``3 N / 4``. ``seeder verify --stop-after-steps S`` sets run (2b)'s stop.
What stops the run is seeder's (:mod:`seeder._run.steps`): ``seeder.Checkpoint`` in a plain
loop, ``SeederCallback`` in Lightning, ``SeederTrainer`` in transformers; each marks the
stop in the run's ``steps.jsonl``. A resumed run gets ``$SEEDER_RESUME=1`` and the
script's own resume flag where it has one. A check whose stop or resume did not happen
is not tested, and says why, instead of failing.

Example:
    >>> import numpy as np
    >>> from seeder.verify._contract import Metrics
    >>> full = Metrics([(k,) for k in range(1, 25)], np.zeros(24), [k // 8 for k in range(24)])
    >>> stop_steps(full)   # 3 epochs of 8 steps: boundary after epoch 0; mid-epoch inside epoch 1
    ((8, 'the end of epoch 0'), (13, '5 of 8 steps into epoch 1'))
    >>> iters = Metrics([(k,) for k in range(1, 41)], np.zeros(40), [0] * 40)   # 40 iterations
    >>> stop_steps(iters)
    ((20, 'step 20 of 40 (no epochs)'), (31, 'step 31 of 40 (no epochs)'))
    >>> stop_steps(iters, given=7)[1]
    (7, 'given with --stop-after-steps')
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from seeder._run.steps import ENV_STOP, read_marks, read_steps
from seeder.verify._contract import Metrics

__all__ = ["stop_steps", "untested", "no_stop", "NO_STOP", "NO_RESUME", "STEPS_NAME"]

#: The per-step records seeder writes in each run's directory.
STEPS_NAME = "steps.jsonl"
NO_STOP = (
    "asked to stop after step {step}, it ran {ran}: nothing in the run stopped it (seeder stops a "
    "plain loop at ckpt.step() of a seeder.Checkpoint, called after each training step, "
    "Lightning through SeederCallback, a Trainer through SeederTrainer); or map the script's stop "
    "flag with --arg stop_after_steps=..."
)
NO_RESUME = (
    "no resume option; map one with --arg resume=... (or resume through seeder.Checkpoint / "
    "SeederTrainer, or Lightning's fit(ckpt_path=seeder.integrations.lightning.resume_path(...)))"
)

Stop = tuple[Optional[int], str]


GIVEN = "given with --stop-after-steps"


def stop_steps(full: Metrics, given: Optional[int] = None) -> tuple[Stop, Stop]:
    """Where runs (2) and (2b) stop, from run (1)'s records.

    Args:
        full: run (1)'s metrics (seeder's step records).
        given: ``--stop-after-steps S``: run (2b)'s stop, whatever the records say.

    Returns:
        ``((boundary step, where), (mid-epoch step, where))``; a step is ``None`` with the
        reason there is no stop.
    """
    boundary, mid = _from_records(full)
    if given is not None and len(full) and given >= len(full):
        mid = (
            None,
            f"--stop-after-steps {given} leaves no step after it: run (1) made {len(full)} step(s)",
        )
    elif given is not None:
        mid = (given, GIVEN)
    return boundary, mid


def _from_records(full: Metrics) -> tuple[Stop, Stop]:
    epochs, n = full.epochs, len(full)
    if not n or not np.isfinite(full.losses).any():  # nothing to compare a stopped run with
        why = "run (1) recorded no steps with a finite value (an optimizer.step() records one)"
        return (None, why), (None, why)
    seen = list(dict.fromkeys(epochs))
    if len(seen) < 2 or None in seen:  # iteration-based: no epoch to stop between, steps will do
        if n < 3:
            why = f"run (1) made {n} step(s): too few for a stop with steps after it"
            return (None, why), (None, why)
        half = n // 2
        late = min(n - 1, 3 * n // 4 + (1 - (3 * n // 4) % 2))
        late = late if late != half else max(1, half - 1)
        return (half, f"step {half} of {n} (no epochs)"), (late, f"step {late} of {n} (no epochs)")
    counts = [sum(1 for e in epochs if e == x) for x in seen]
    h = len(seen) // 2
    boundary = (sum(counts[:h]), f"the end of epoch {seen[h - 1]}")
    m = max(1, h - 1)
    per = counts[m]
    if per < 2:
        return boundary, (
            None,
            "each epoch is a single step, so there is no step inside an epoch to stop at",
        )
    into = min(per // 2 + (1 - (per // 2) % 2), per - 1)
    return boundary, (sum(counts[:m]) + into, f"{into} of {per} steps into epoch {seen[m]}")


def stop_env(step: int) -> dict[str, str]:
    """The environment that asks the run to stop after ``step``."""
    return {ENV_STOP: str(step)}


def no_stop(run_dir: Path, stop: int) -> str:
    """That run ``run_dir`` was asked to stop after step ``stop`` and how far it ran instead.

    >>> no_stop(Path("/nonexistent"), 54)[:50]
    'asked to stop after step 54, it ran no recorded st'
    """
    steps = [
        r["step"] for r in read_steps(Path(run_dir) / STEPS_NAME) if type(r.get("step")) is int
    ]
    ran = f"all {max(steps)} steps" if steps else "no recorded step"
    return NO_STOP.format(step=stop, ran=ran)


def untested(
    run_dir: Path, resume_dir: Path, stop: Optional[int], resume_flag: bool
) -> Optional[str]:
    """Why a stop/resume pair tests nothing (its stop or its resume did not happen), or ``None``."""
    if stop is None:
        return None
    if "stopped" not in read_marks(Path(run_dir) / STEPS_NAME):
        return no_stop(run_dir, stop) if resume_flag else NO_RESUME
    if not resume_flag and "resumed" not in read_marks(Path(resume_dir) / STEPS_NAME):
        return NO_RESUME
    return None
