"""``seeder.Checkpoint``: model, optimizer and seeder state in one file, written atomically, resumed
from.

A plain training loop gets an exact resume from any step, and ``seeder verify`` its
stops and resumes, with three lines::

    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    start = ckpt.resume(args.resume)          # the epoch to start from (0 for a fresh run)
    for epoch in range(start, epochs):
        seeder.reseed(1, epoch)
        for x, y in loader:
            ...
            optimizer.step()
            ckpt.step()                       # after each optimizer step

``step()`` saves every ``every_steps`` steps (0: never on its own) and, when ``seeder
verify`` asks for a stop at this step, saves and exits with status 0. ``ckpt.steps`` counts
the optimizer steps of the run, those before the checkpoint included: after ``resume()`` it
is the step the checkpoint was saved at, where an iteration-based loop (no epochs) goes on::

    ckpt = seeder.Checkpoint("out/ckpt.pt", model=model, optimizer=optimizer)
    ckpt.resume(args.resume)
    for iter_num in range(ckpt.steps, max_iters):   # 0 in a fresh run
        x, y = get_batch()                        # drawn in its step, after the last checkpoint
        ...
        optimizer.step()
        ckpt.step()

``save()`` writes
``{"model", "optimizer", "scheduler", "seeder", "step"}`` to a temporary file of its own in
the same directory, fsyncs it, renames it over ``path`` and fsyncs the directory (a crash
leaves the old file or the new one; two processes saving to one path leave the last whole
save; a later save removes the temporary file of a write that was killed); under
``torch.distributed`` every rank calls it (the seeder states of all ranks are gathered) and
rank 0 writes. ``resume(True)`` reads the whole file and checks every part against the
model, optimizer, scheduler and seeder before loading any (``FileNotFoundError`` if it is
missing, one ``seeder.StateError`` naming the file and what is wrong otherwise, and nothing
changed), ``resume(False)`` does nothing, ``resume()`` loads only in a run that ``seeder
verify`` resumes. Loading uses ``torch.load(weights_only=True)``.

Example:
    >>> import os, tempfile, torch, seeder
    >>> seeder.init(master_seed=3); seeder.reseed(1, 0)
    >>> net = torch.nn.Linear(2, 1); opt = torch.optim.SGD(net.parameters(), lr=0.1)
    >>> path = os.path.join(tempfile.mkdtemp(), "last.pt")
    >>> ckpt = Checkpoint(path, model=net, optimizer=opt); ckpt.save()
    >>> Checkpoint(path, model=net, optimizer=opt).resume(True)
    0
    >>> net(torch.ones(2)).sum().backward(); opt.step(); ckpt.step(); ckpt.save()
    >>> again = Checkpoint(path, model=net, optimizer=opt); again.resume(True); again.steps
    0
    1
"""

from __future__ import annotations

import io
import logging
import os
from typing import Any, Optional, Union

import torch

from seeder._atomic import write_atomic
from seeder._checkpoint_file import check_checkpoint, read_checkpoint
from seeder._checks import check_int, is_bool
from seeder._run import steps as stepwatch
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._state.rollback import interrupts_deferred

__all__ = ["Checkpoint"]

logger = logging.getLogger("seeder")


class Checkpoint:
    """One checkpoint file for a plain loop: see the module documentation.

    Args:
        path: the file (its directory is created on the first save).
        model: what ``state_dict()``/``load_state_dict()`` save and load (an ``nn.Module``).
        optimizer: its optimizer, or ``None``.
        scheduler: an LR scheduler (anything with ``state_dict()``/``load_state_dict()``), or
            ``None``.
        every_steps: ``step()`` saves every this many steps (0: only verify's stop and
            ``save()`` do).
        seeder: the seeder whose state goes with it (default: the module-level one).

    Attributes:
        steps: optimizer steps of the run so far, those of the run it resumed included
            (``step()`` adds one). After ``resume()``, the step the checkpoint was saved at: an
            iteration-based loop starts there (``for iter_num in range(ckpt.steps, max_iters)``).

    Raises:
        TypeError: a path that is no file path, or a model without ``state_dict()``.
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        model: torch.nn.Module,
        optimizer: Optional[torch.optim.Optimizer] = None,
        scheduler: Any = None,
        every_steps: int = 0,
        seeder: Optional[Seeder] = None,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        for name, obj in (("model", model), ("optimizer", optimizer), ("scheduler", scheduler)):
            if (obj is not None or name == "model") and not (
                hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")
            ):
                raise TypeError(
                    f"{name} must have state_dict()/load_state_dict() (a torch "
                    f"{name}), got {type(obj).__name__} {obj!r:.80}"
                )
        self.path = os.fspath(path)
        if self.path.endswith(("/", os.sep)) or os.path.isdir(self.path):
            raise ValueError(
                f"path {self.path!r} names a directory; pass the checkpoint "
                f"file's path (e.g. {os.path.join(self.path, 'last.pt')!r})"
            )
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.every_steps = check_int(every_steps, "every_steps", low=0)
        self.seeder = resolve_seeder(seeder)
        self.steps = 0  # optimizer steps of the run, restored ones included (public: see above)

    def _rank(self) -> int:
        return self.seeder.rank if self.seeder.initialized else 0

    def save(self) -> None:
        """Write model, optimizer, scheduler and seeder state atomically (every rank calls it;
        rank 0 writes).

        Two processes saving to one path do not disturb each other: the last whole save wins.
        """
        gathered = (
            self.seeder.gather_state_dict() if process_group_active() else self.seeder.state_dict()
        )
        if self._rank() != 0:
            return
        state = {
            "model": self.model.state_dict(),
            "step": self.steps,
            "seeder": gathered,
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
        }
        buf = io.BytesIO()
        torch.save(state, buf)
        write_atomic(self.path, buf.getvalue())

    def resume(self, enabled: Optional[bool] = None) -> int:
        """Load the file (``enabled=None``: only when ``seeder verify`` resumes this run); return
        the epoch to start at.

        The whole file is read and every part checked against the model, optimizer, scheduler and
        seeder before any of them loads: a refused file changes nothing. Sets :attr:`steps` to the
        step the checkpoint was saved at (unchanged when nothing is loaded): an iteration-based
        loop starts there.

        Raises:
            TypeError: ``enabled`` is not ``True``, ``False`` or ``None``.
            FileNotFoundError: there is no file to resume from.
            seeder.StateError: the file is empty, truncated, not a checkpoint, or a part does not
                fit.
        """
        if enabled is None:
            enabled = stepwatch.resume_requested()
        elif not is_bool(enabled):
            raise TypeError(
                f"resume() takes True, False or None (resume when seeder verify asks), "
                f"got {type(enabled).__name__} {enabled!r}"
            )
        if not enabled:
            return 0
        state = read_checkpoint(self.path)
        steps = check_checkpoint(
            state, self.path, self.model, self.optimizer, self.scheduler, self.seeder
        )
        with interrupts_deferred():  # checked whole: a Ctrl-C would leave only some parts loaded
            self.model.load_state_dict(state["model"])
            if self.optimizer is not None:
                self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None:
                self.scheduler.load_state_dict(state["scheduler"])
            self.seeder.load_state_dict(state["seeder"])
            self.steps = steps
        stepwatch.mark("resumed", self.steps)
        last = self.seeder.last_reseed
        logger.info("resumed from %s after step %d", self.path, self.steps)
        return last[1] if last is not None and last[0] == 1 else 0

    def step(self) -> None:
        """Call after each optimizer step: saves every ``every_steps`` steps, and performs ``seeder
        verify``'s stop."""
        self.steps += 1
        if stepwatch.should_stop():
            self.save()
            stepwatch.mark("stopped")
            logger.info(
                "stopped after step %d for seeder verify; checkpoint %s", self.steps, self.path
            )
            raise SystemExit(0)
        if self.every_steps and self.steps % self.every_steps == 0:
            self.save()
