#!/usr/bin/env python
"""examples/train.py with fault hooks for the kill tests: the example itself carries none.

    python tests/scripts/train_faults.py [HOOKS] [train.py arguments]

Hooks (all optional; the remaining arguments go to ``examples/train.py``'s ``main``):

``--fault-step-sleep SECONDS``
    sleep after every step (so that a kill at a random time lands inside the run);
``--fault-ckpt-pause-at STEP`` with ``--fault-ckpt-pause SECONDS``
    when writing the checkpoint of global step STEP, write half of its bytes to the
    temporary file the example would use, print ``CKPT_PAUSE STEP`` and sleep, so
    that a kill lands in the middle of a checkpoint write;
``--fault-ckpt-kill-at STEP`` with ``--fault-ckpt-kill-fraction F``
    when writing the checkpoint of global step STEP, write the first fraction F of its bytes
    to the temporary file (F = 1: all of them, before the rename) and SIGKILL itself;
``--fault-kill-at STEP`` with ``--fault-kill-rank RANK``
    that rank SIGKILLs itself after logging step STEP, on the first ``torchrun``
    attempt only (``TORCHELASTIC_RESTART_COUNT`` 0).

The hooks are installed by replacing the example's ``atomic_save`` and ``Metrics``
module attributes, which its ``main`` looks up at call time.
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Dict

import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import train  # noqa: E402  (examples/train.py)

HOOKS = argparse.ArgumentParser(add_help=False)
HOOKS.add_argument("--fault-step-sleep", type=float, default=0.0)
HOOKS.add_argument("--fault-ckpt-pause", type=float, default=0.0)
HOOKS.add_argument("--fault-ckpt-pause-at", type=int, default=None)
HOOKS.add_argument("--fault-ckpt-kill-at", type=int, default=None)
HOOKS.add_argument("--fault-ckpt-kill-fraction", type=float, default=0.5)
HOOKS.add_argument("--fault-kill-at", type=int, default=None)
HOOKS.add_argument("--fault-kill-rank", type=int, default=0)


def install(hooks: argparse.Namespace) -> None:
    """Replace the example's checkpoint writer and metrics logger by versions with the requested faults."""
    plain_save = train.atomic_save
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    rank = int(os.environ.get("RANK", "0"))

    def paused_save(obj: Any, path: str) -> None:
        if obj.get("step") == hooks.fault_ckpt_kill_at:
            buf = io.BytesIO()
            torch.save(obj, buf)
            data = buf.getvalue()
            with open(train.temporary_path(path), "wb") as f:
                f.write(data[: int(len(data) * hooks.fault_ckpt_kill_fraction)])
                f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if hooks.fault_ckpt_pause and obj.get("step") == hooks.fault_ckpt_pause_at:
            buf = io.BytesIO()
            torch.save(obj, buf)
            data = buf.getvalue()
            with open(train.temporary_path(path), "wb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
            print(f"CKPT_PAUSE {obj['step']}", flush=True)
            time.sleep(hooks.fault_ckpt_pause)
        plain_save(obj, path)

    class FaultMetrics(train.Metrics):
        def write(self, record: Dict[str, Any]) -> None:
            super().write(record)
            if "loss" not in record:
                return
            if hooks.fault_step_sleep:
                time.sleep(hooks.fault_step_sleep)
            if record["step"] == hooks.fault_kill_at and rank == hooks.fault_kill_rank and first_attempt:
                os.kill(os.getpid(), signal.SIGKILL)

    train.atomic_save = paused_save
    train.Metrics = FaultMetrics


def main() -> int:
    hooks, rest = HOOKS.parse_known_args()
    install(hooks)
    return train.main(rest)


if __name__ == "__main__":
    sys.exit(main())
