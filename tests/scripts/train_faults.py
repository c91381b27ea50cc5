#!/usr/bin/env python
"""examples/train.py with fault hooks for the kill tests: the example itself carries none.

    python tests/scripts/train_faults.py [HOOKS] [train.py arguments]

Hooks (all optional; the remaining arguments go to ``examples/train.py``'s ``main``):

``--fault-step-sleep SECONDS``
    sleep after every optimizer step (so that a kill at a random time lands inside the run);
``--fault-ckpt-pause-at STEP`` with ``--fault-ckpt-pause SECONDS``
    when saving the checkpoint of global step STEP, write half of its bytes to the
    temporary file ``seeder.Checkpoint`` uses, print ``CKPT_PAUSE STEP`` and sleep, so
    that a kill lands in the middle of a checkpoint write;
``--fault-ckpt-kill-at STEP`` with ``--fault-ckpt-kill-fraction F``
    when saving the checkpoint of global step STEP, write the first fraction F of its bytes
    to the temporary file (F = 1: all of them, before the rename) and SIGKILL itself;
``--fault-kill-at STEP`` with ``--fault-kill-rank RANK``
    that rank SIGKILLs itself right after optimizer step STEP (its record is written,
    its checkpoint not yet), on the first ``torchrun`` attempt only
    (``TORCHELASTIC_RESTART_COUNT`` 0).

The hooks are a subclass of ``seeder.Checkpoint`` put in its place on the ``seeder``
module, where the example looks it up. The bytes of a cut write are those that
``Checkpoint.save`` writes, taken from a save to a scratch directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import train  # noqa: E402  (examples/train.py)

import seeder  # noqa: E402

HOOKS = argparse.ArgumentParser(add_help=False)
HOOKS.add_argument("--fault-step-sleep", type=float, default=0.0)
HOOKS.add_argument("--fault-ckpt-pause", type=float, default=0.0)
HOOKS.add_argument("--fault-ckpt-pause-at", type=int, default=None)
HOOKS.add_argument("--fault-ckpt-kill-at", type=int, default=None)
HOOKS.add_argument("--fault-ckpt-kill-fraction", type=float, default=0.5)
HOOKS.add_argument("--fault-kill-at", type=int, default=None)
HOOKS.add_argument("--fault-kill-rank", type=int, default=0)


def install(hooks: argparse.Namespace) -> None:
    """Put a ``seeder.Checkpoint`` with the requested faults where the example finds
    ``seeder.Checkpoint``."""
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    rank = int(os.environ.get("RANK", "0"))

    class FaultCheckpoint(seeder.Checkpoint):
        def saved_bytes(self) -> bytes:
            """What ``save()`` writes now (every rank takes part; rank 0 gets the bytes)."""
            real, scratch = self.path, tempfile.mkdtemp(prefix="fault-ckpt-")
            self.path = os.path.join(scratch, os.path.basename(real))
            try:
                super().save()
                return Path(self.path).read_bytes() if rank == 0 else b""
            finally:
                self.path = real
                shutil.rmtree(scratch, ignore_errors=True)

        def write_part(self, fraction: float, sync: bool) -> None:
            data = self.saved_bytes()
            tmp = Path(self.path).parent / f".{Path(self.path).name}.{os.getpid()}.tmp"
            tmp.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data[: int(len(data) * fraction)])
                f.flush()
                if sync:
                    os.fsync(f.fileno())

        def save(self) -> None:
            if self.steps == hooks.fault_ckpt_kill_at:
                self.write_part(hooks.fault_ckpt_kill_fraction, sync=False)
                os.kill(os.getpid(), signal.SIGKILL)
            if hooks.fault_ckpt_pause and self.steps == hooks.fault_ckpt_pause_at:
                self.write_part(0.5, sync=True)
                print(f"CKPT_PAUSE {self.steps}", flush=True)
                time.sleep(hooks.fault_ckpt_pause)
            super().save()

        def step(self) -> None:
            done = self.steps + 1  # the optimizer step just taken
            if hooks.fault_step_sleep:
                time.sleep(hooks.fault_step_sleep)
            if done == hooks.fault_kill_at and rank == hooks.fault_kill_rank and first_attempt:
                os.kill(os.getpid(), signal.SIGKILL)
            super().step()

    seeder.Checkpoint = FaultCheckpoint


def main() -> int:
    hooks, rest = HOOKS.parse_known_args()
    install(hooks)
    return train.main(rest)


if __name__ == "__main__":
    sys.exit(main())
