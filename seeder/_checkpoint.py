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

Reading the file is :func:`read_checkpoint`: every way a file can be unreadable (missing, a
directory, empty, truncated, not a checkpoint) becomes one error that names the file and what is
wrong. :func:`check_checkpoint` checks every part before anything loads: the model's keys, shapes
and dtypes against the model's own state (:func:`check_model_state`), the optimizer's parameter
groups and, for torch's optimizers, the shapes of their per-parameter state
(:func:`check_optimizer_state`), the scheduler's and the step's types, and the seeder part with
seeder's own validation, which applies nothing.

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
from collections.abc import Mapping
from typing import Any, Optional, Union

import torch

from seeder._atomic import write_atomic
from seeder._checks import check_int, is_bool, is_int
from seeder._errors import StateError
from seeder._run import steps as stepwatch
from seeder._run.where import caller_variables
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._state.rollback import interrupts_deferred

__all__ = [
    "Checkpoint",
    "REQUIRED_KEYS",
    "read_checkpoint",
    "check_checkpoint",
    "check_model_state",
    "check_optimizer_state",
]

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
        TypeError: a path that is no file path, or a model, optimizer or scheduler without
            ``state_dict()``/``load_state_dict()``.
        ValueError: a path that names a directory, or a negative ``every_steps``.

    Example:
        >>> import os, tempfile, torch, seeder
        >>> seeder.init(master_seed=3)
        >>> net = torch.nn.Linear(2, 1)
        >>> ckpt = seeder.Checkpoint(os.path.join(tempfile.mkdtemp(), "last.pt"), model=net)
        >>> ckpt.steps
        0
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
        stepwatch.checkpoint_counts()  # under seeder verify, step() is the step

    def _rank(self) -> int:
        return self.seeder.rank if self.seeder.initialized else 0

    def save(self) -> None:
        """Write model, optimizer, scheduler and seeder state atomically.

        Under ``torch.distributed`` every rank calls it (the seeder states of all ranks are
        gathered) and rank 0 writes. Two processes saving to one path do not disturb each other:
        the last whole save wins.

        Raises:
            RuntimeError: the seeder was not initialised, or its last reseed raised.
            OSError: the file cannot be written; the file already there is unchanged.

        Example:
            >>> import os, tempfile, torch, seeder
            >>> seeder.init(master_seed=3); seeder.reseed(1, 0)
            >>> path = os.path.join(tempfile.mkdtemp(), "last.pt")
            >>> Checkpoint(path, model=torch.nn.Linear(2, 1)).save(); os.path.exists(path)
            True
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

        Args:
            enabled: ``True`` loads the file, ``False`` does nothing, ``None`` loads it only in a
                run that ``seeder verify`` resumes.

        Returns:
            The epoch to start at: the epoch of the last ``reseed(1, epoch)`` saved, else 0.

        Raises:
            TypeError: ``enabled`` is not ``True``, ``False`` or ``None``.
            FileNotFoundError: there is no file to resume from.
            seeder.StateError: the file is empty, truncated, not a checkpoint, or a part does not
                fit.

        Example:
            >>> import os, tempfile, torch, seeder
            >>> seeder.init(master_seed=3); seeder.reseed(1, 2)
            >>> net = torch.nn.Linear(2, 1); path = os.path.join(tempfile.mkdtemp(), "last.pt")
            >>> Checkpoint(path, model=net).save()
            >>> Checkpoint(path, model=net).resume(True), Checkpoint(path, model=net).resume(False)
            (2, 0)
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
        """Count an optimizer step: call it after each one.

        Saves every ``every_steps`` steps. When ``seeder verify`` asks for a stop at this step, it
        saves and exits with status 0.

        Raises:
            SystemExit: ``seeder verify``'s stop, after the save.

        Example:
            >>> import os, tempfile, torch, seeder
            >>> seeder.init(master_seed=3); seeder.reseed(1, 0)
            >>> path = os.path.join(tempfile.mkdtemp(), "last.pt")
            >>> ckpt = Checkpoint(path, model=torch.nn.Linear(2, 1), every_steps=2)
            >>> ckpt.step(); os.path.exists(path), ckpt.steps
            (False, 1)
            >>> ckpt.step(); os.path.exists(path), ckpt.steps
            (True, 2)
        """
        self.steps += 1
        if stepwatch.steps_done() is not None:  # under seeder verify: record the step's state
            stepwatch.checkpoint_step(_in_reach(self, caller_variables()))
        if stepwatch.should_stop():
            self.save()
            stepwatch.mark("stopped")
            logger.info(
                "stopped after step %d for seeder verify; checkpoint %s", self.steps, self.path
            )
            raise SystemExit(0)
        if self.every_steps and self.steps % self.every_steps == 0:
            self.save()


def _in_reach(ckpt: Checkpoint, names: dict[str, Any]) -> dict[str, Any]:
    """What ``seeder verify`` compares after a step: the objects of the caller's variables and the
    checkpoint's own parts (:mod:`seeder._run.objects`)."""
    from seeder._run.objects import objects_in

    own: dict[str, Any] = {}
    values: dict[str, Any] = {}  # tensors and plain values the checkpoint holds by name
    for attr, value in vars(ckpt).items():
        if isinstance(value, Mapping):  # named parts
            for k, v in value.items():
                if isinstance(k, str):
                    own[f"{attr}[{k!r}]"] = v
                    if isinstance(v, (torch.Tensor, int, float)):
                        values[f"checkpoint {attr}[{k!r}]"] = v
        else:
            own[attr] = value
    return {**objects_in({**names, **{f"checkpoint {k}": v for k, v in own.items()}}), **values}


#: The keys of every checkpoint file ``seeder.Checkpoint.save`` writes.
REQUIRED_KEYS = frozenset({"model", "optimizer", "scheduler", "seeder", "step"})
_FIX = "resume from an earlier checkpoint, or start without resuming"


def read_checkpoint(path: str) -> dict[str, Any]:
    """The dict in the checkpoint file ``path`` (``torch.load(weights_only=True)`` on the CPU).

    Args:
        path: the file ``seeder.Checkpoint.save`` wrote.

    Returns:
        The dict with the keys :data:`REQUIRED_KEYS`.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        IsADirectoryError: ``path`` is a directory.
        StateError: the file is empty, truncated, or not a checkpoint ``seeder.Checkpoint`` wrote.
    """
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{path} is a directory, not a checkpoint file; pass the file's path"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no checkpoint at {path} to resume from; run without resuming first"
        )
    if os.path.getsize(path) == 0:
        raise StateError(
            f"the checkpoint {path} is empty (0 bytes), so it was not written by seeder.Checkpoint "
            f"(which renames only whole files into place); {_FIX}"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        # torch raises EOFError, RuntimeError, OSError or UnpicklingError by the damage
        raise StateError(
            f"the checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); it is truncated, "
            f"damaged or not a torch.save file; {_FIX}"
        ) from exc
    if not isinstance(state, dict):
        raise StateError(
            f"the checkpoint {path} holds a {type(state).__name__}, not the dict seeder.Checkpoint "
            f"writes; {_FIX}"
        )
    missing = sorted(REQUIRED_KEYS - set(state))
    if missing:
        raise StateError(
            f"the checkpoint {path} has no {', '.join(repr(k) for k in missing)} (it has "
            f"{sorted(map(str, state))}), so seeder.Checkpoint did not write it; {_FIX}"
        )
    return state


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"


def check_model_state(saved: Any, model: torch.nn.Module, path: str) -> None:
    """Raise :class:`StateError` unless ``saved`` has ``model.state_dict()``'s keys, shapes, dtypes.

    Args:
        saved: the checkpoint's ``"model"`` part.
        model: the module it loads into.
        path: the file, for the messages.

    Raises:
        StateError: a key is missing or unexpected, or a tensor's shape or dtype differs.

    Example:
        >>> net = torch.nn.Linear(2, 1)
        >>> bad = {"weight": torch.zeros(1, 3), "bias": torch.zeros(1)}
        >>> check_model_state(bad, net, "ckpt.pt")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        seeder.StateError: ckpt.pt: the model's 'weight' has shape (1, 3) in the ...
    """
    if not isinstance(saved, Mapping):
        raise StateError(f"{path}: the model part is a {type(saved).__name__}, not a state dict")
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or extra:
        raise StateError(
            f"{path}: the model's keys differ: missing {missing[:5]}, unexpected {extra[:5]}; "
            "build the model as the run that saved it did"
        )
    for key, mine in own.items():
        if not isinstance(mine, torch.Tensor):
            continue
        theirs = saved[key]
        if not isinstance(theirs, torch.Tensor):
            raise StateError(
                f"{path}: the model's {key!r} is a {type(theirs).__name__} in the checkpoint, "
                "not a tensor"
            )
        if theirs.shape != mine.shape:
            raise StateError(
                f"{path}: the model's {key!r} has shape {_shape(theirs)} in the checkpoint but "
                f"{_shape(mine)} in the model; build the model as the run that saved it did"
            )
        if theirs.dtype != mine.dtype:
            raise StateError(
                f"{path}: the model's {key!r} is {theirs.dtype} in the checkpoint but "
                f"{mine.dtype} in the model; convert the model (model.to(dtype)) as the run that "
                "saved it did"
            )


def _params(optimizer: torch.optim.Optimizer) -> list[list[torch.Tensor]]:
    return [list(group["params"]) for group in optimizer.param_groups]


def check_optimizer_state(saved: Any, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Raise :class:`StateError` unless ``saved`` fits ``optimizer``: its parameter groups and their
    sizes, and for torch's optimizers (LBFGS aside) each parameter's state tensors of its shape.

    Args:
        saved: the checkpoint's ``"optimizer"`` part.
        optimizer: the optimizer it loads into.
        path: the file, for the messages.

    Raises:
        StateError: what does not fit, named.
    """
    fix = "build the optimizer over the same parameters as the run that saved it"
    if not (
        isinstance(saved, Mapping)
        and isinstance(saved.get("param_groups"), list)
        and isinstance(saved.get("state"), Mapping)
    ):
        raise StateError(
            f"{path}: the optimizer part is not an optimizer state dict (state and param_groups)"
        )
    groups, theirs = _params(optimizer), saved["param_groups"]
    if len(theirs) != len(groups):
        raise StateError(
            f"{path}: the optimizer has {len(theirs)} parameter group(s) in the checkpoint but "
            f"{len(groups)} here; {fix}"
        )
    ids: dict[Any, torch.Tensor] = {}
    for i, (group, mine) in enumerate(zip(theirs, groups)):
        if not (isinstance(group, Mapping) and isinstance(group.get("params"), list)):
            raise StateError(f"{path}: the optimizer's parameter group {i} has no list of params")
        if len(group["params"]) != len(mine):
            raise StateError(
                f"{path}: the optimizer's parameter group {i} has {len(group['params'])} "
                f"parameters in the checkpoint but {len(mine)} here; {fix}"
            )
        ids.update(zip(group["params"], mine))
    shaped = type(optimizer).__module__.startswith("torch.optim") and not isinstance(
        optimizer, torch.optim.LBFGS
    )
    for pid, entry in saved["state"].items():
        if pid not in ids:
            raise StateError(
                f"{path}: the optimizer's state names parameter {pid!r}, which no parameter "
                "group holds"
            )
        if not (shaped and isinstance(entry, Mapping)):
            continue
        param = ids[pid]
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise StateError(
                    f"{path}: the optimizer's {name!r} of parameter {pid!r} has shape "
                    f"{_shape(value)} but the parameter has {_shape(param)}; {fix}"
                )


def check_checkpoint(
    state: dict[str, Any],
    path: str,
    model: torch.nn.Module,
    optimizer: Optional[torch.optim.Optimizer],
    scheduler: Any,
    seeder: Seeder,
) -> int:
    """Check every part of a :func:`read_checkpoint` dict before anything loads; return its step.

    Args:
        state: the file's dict.
        path: the file, for the messages.
        model: the module the model part loads into.
        optimizer: the optimizer the optimizer part loads into (``None``: not loaded).
        scheduler: the scheduler the scheduler part loads into (``None``: not loaded).
        seeder: the :class:`seeder.Seeder` whose ``check_state_dict`` checks the seeder part.

    Returns:
        The optimizer steps the file was saved after.

    Raises:
        StateError: a part does not fit; nothing was changed.
    """
    step = state["step"]
    if not is_int(step) or step < 0:
        raise StateError(
            f"{path}: 'step' must be a non-negative int, got {type(step).__name__} {step!r}"
        )
    check_model_state(state["model"], model, path)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler)):
        if obj is not None and state[name] is None:
            raise StateError(
                f"{path} holds no {name} state, but this run has a {name}: its state would start "
                f"fresh; resume with a checkpoint saved with the {name}, or build the Checkpoint "
                f"without {name}="
            )
    if optimizer is not None:
        check_optimizer_state(state["optimizer"], optimizer, path)
    if scheduler is not None and not isinstance(state["scheduler"], Mapping):
        raise StateError(
            f"{path}: the scheduler part is a {type(state['scheduler']).__name__}, not a state dict"
        )
    try:
        seeder.check_state_dict(state["seeder"])
    except StateError as exc:
        raise StateError(f"{path}: the seeder part: {exc}") from None
    return int(step)
