"""``seeder.Checkpoint``: model, optimizer and seeder state in one file, written atomically, resumed from.

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
``{"model", "optimizer", "scheduler", "seeder", "step"}`` to a temporary file in the same
directory, fsyncs it, renames it over ``path`` and fsyncs the directory (a crash leaves the
old file or the new one, and the next save removes the temporary file of a write that was
killed); under ``torch.distributed`` every rank calls it (the seeder states of all ranks
are gathered) and rank 0 writes. ``resume(True)`` loads the file (``FileNotFoundError`` if it
is missing), ``resume(False)`` does nothing, ``resume()`` loads only in a run that
``seeder verify`` resumes. Loading uses ``torch.load(weights_only=True)``.

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

from . import stepwatch
from .checks import check_int
from .core import Seeder
from .default import resolve_seeder
from .distributed import process_group_active

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

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, model: torch.nn.Module,
                 optimizer: Optional[torch.optim.Optimizer] = None, scheduler: Any = None, every_steps: int = 0,
                 seeder: Optional[Seeder] = None) -> None:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        if not hasattr(model, "state_dict"):
            raise TypeError(f"model must have state_dict()/load_state_dict() (an nn.Module), got {type(model).__name__}")
        self.path = os.fspath(path)
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.every_steps = check_int(every_steps, "every_steps", low=0)
        self.seeder = resolve_seeder(seeder)
        self.steps = 0  # optimizer steps of the run, restored ones included (public: see above)

    def _rank(self) -> int:
        return self.seeder.rank if self.seeder.initialized else 0

    def save(self) -> None:
        """Write model, optimizer, scheduler and seeder state atomically (every rank calls it; rank 0 writes)."""
        gathered = self.seeder.gather_state_dict() if process_group_active() else self.seeder.state_dict()
        if self._rank() != 0:
            return
        state = {"model": self.model.state_dict(), "step": self.steps, "seeder": gathered,
                 "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
                 "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None}
        buf = io.BytesIO()
        torch.save(state, buf)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(self.path)}.{os.getpid()}.tmp")
        _remove_killed_writes(directory, os.path.basename(self.path), keep=os.path.basename(tmp))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(buf.getvalue())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            _fsync_directory(directory)  # the rename itself survives a power cut
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def resume(self, enabled: Optional[bool] = None) -> int:
        """Load the file (``enabled=None``: when ``seeder verify`` resumes this run); the epoch to start.

        Sets :attr:`steps` to the step the checkpoint was saved at (unchanged when nothing is
        loaded): an iteration-based loop starts there.
        """
        if enabled is None:
            enabled = stepwatch.resume_requested()
        if not enabled:
            return 0
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"no checkpoint at {self.path} to resume from; run without resuming first")
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        if self.optimizer is not None and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.seeder.load_state_dict(state["seeder"])
        self.steps = int(state.get("step", 0))
        stepwatch.mark("resumed", self.steps)
        last = self.seeder.last_reseed
        logger.info("resumed from %s after step %d", self.path, self.steps)
        return last[1] if last is not None and last[0] == 1 else 0

    def step(self) -> None:
        """Call after each optimizer step: saves every ``every_steps`` steps, and performs ``seeder verify``'s stop."""
        self.steps += 1
        if stepwatch.should_stop():
            self.save()
            stepwatch.mark("stopped")
            logger.info("stopped after step %d for seeder verify; checkpoint %s", self.steps, self.path)
            raise SystemExit(0)
        if self.every_steps and self.steps % self.every_steps == 0:
            self.save()


def _remove_killed_writes(directory: str, name: str, keep: str) -> None:
    """Remove the temporary files ``.NAME.<pid>.tmp`` in ``directory`` that writes of ``NAME`` killed midway left."""
    for entry in os.listdir(directory):
        if entry.startswith(f".{name}.") and entry.endswith(".tmp") and entry != keep:
            try:
                os.unlink(os.path.join(directory, entry))
            except FileNotFoundError:
                pass


def _fsync_directory(directory: str) -> None:
    """Flush a directory's entries (a rename in it) to disk, where the platform can open a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # Windows opens no directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
