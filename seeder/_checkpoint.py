"""``seeder.Checkpoint``: model, optimizer and seeder state in one file, written atomically, resumed
from.

A plain training loop gets an exact resume from any step, and the tools (``seeder verify``) their
stops and resumes, with three lines::

    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    start = ckpt.resume(args.resume)          # the epoch to start from (0 for a fresh run)
    for epoch in range(start, epochs):
        seeder.reseed(1, epoch)
        for x, y in loader:
            ...
            optimizer.step()
            ckpt.step()                       # after each optimizer step

``step()`` saves every ``every_steps`` steps (0: never on its own) and tells the tools of the
run (:data:`seeder._hooks.STEP`): ``seeder verify``'s hook records the step and, at the stop
it asks for, saves through the checkpoint and ends the run (status 0). ``ckpt.steps`` counts
the optimizer steps of the run, those before the checkpoint included: after ``resume()`` it
is the step the checkpoint was saved at, where an iteration-based loop (no epochs) goes on::

    ckpt = seeder.Checkpoint("out/ckpt.pt", model=model, optimizer=optimizer)
    ckpt.resume(args.resume)
    for iter_num in range(ckpt.steps, max_iters):   # 0 in a fresh run
        x, y = get_batch()                        # drawn in its step, after the last checkpoint
        ...
        optimizer.step()
        ckpt.step()

Any number of objects go in by name (keywords): a second model and its optimizer, an EMA, a
``GradScaler``, anything with ``state_dict()``/``load_state_dict()``; tensors and plain values the
script reads back after a resume (an RNN's hidden state, the best loss) go in ``values=``, a dict
the script keeps up to date in :attr:`Checkpoint.values`::

    ckpt = seeder.Checkpoint("ckpt/gan.pt", netG=netG, netD=netD, optG=optG, optD=optD,
                             values={"best": float("inf")})
    ckpt.resume(args.resume)
    best = ckpt.values["best"]                    # the saved value after a resume
    ...
    ckpt.values["best"] = best                    # before the next save

:attr:`Checkpoint.objects` is the read-only mapping of every object saved, by name.

``save()`` writes each object's ``state_dict()`` under its name, ``objects`` (each name's class),
``values``, ``seeder`` and ``step`` to a temporary file of its own in
the same directory, fsyncs it, renames it over ``path`` and fsyncs the directory (a crash
leaves the old file or the new one; two processes saving to one path leave the last whole
save; a later save removes the temporary file of a write that was killed); under
``torch.distributed`` every rank calls it (the seeder states of all ranks are gathered) and
rank 0 writes. ``resume(True)`` reads the whole file and checks every part against the
objects, values and seeder before loading any (``FileNotFoundError`` if it is
missing, one ``seeder.StateError`` naming the file and what is wrong otherwise, and nothing
changed), ``resume(False)`` does nothing, ``resume()`` loads only when a tool that started the
run asks for a resume (:data:`seeder._hooks.RESUME`: ``seeder verify``'s resumed runs). Loading
uses ``torch.load(weights_only=True)``.

Reading the file back and checking every part before anything loads is
:mod:`seeder._checkpoint_checks` (:func:`read_checkpoint`, :func:`check_checkpoint`). The objects
then load in order, each from a copy of its state taken just before, so a ``load_state_dict`` that
raises half-way puts back those loaded before it.

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

import copy
import io
import logging
import os
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Optional, Union

import torch

from seeder import _hooks as hooks
from seeder._atomic import write_atomic
from seeder._checkpoint_checks import (
    FORMAT,
    LEGACY_NAMES,
    VERSION,
    check_checkpoint,
    class_name,
    read_checkpoint,
)
from seeder._checks import check_int, is_bool
from seeder._errors import SeederWarning
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._state.rollback import interrupts_deferred

__all__ = ["Checkpoint", "RESERVED"]

logger = logging.getLogger("seeder")


#: Names a named object cannot take: the file's own keys.
RESERVED = frozenset({"objects", "values", "seeder", "step", "format", "version"})

_ABSENT: Any = object()


def _stateful(obj: Any) -> bool:
    return hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")


def _check_value(value: Any, where: str, depth: int = 0) -> None:
    """Raise ``TypeError`` unless ``value`` is what ``torch.load(weights_only=True)`` reads back:
    tensors, numbers, strings, ``None`` and lists, tuples and dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return
    if depth < 32 and isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        for i, item in enumerate(value):
            _check_value(item, f"{where}[{i}]", depth + 1)
        return
    if depth < 32 and type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has the key {key!r}: keys must be str or int")
            _check_value(item, f"{where}[{key!r}]", depth + 1)
        return
    raise TypeError(
        f"{where} is a {class_name(value)}: a checkpoint's values are tensors, numbers, strings, "
        "None and lists, tuples or dicts of them (what torch.load(weights_only=True) reads back); "
        "convert it (a NumPy array: torch.from_numpy), or pass an object with "
        "state_dict()/load_state_dict() as a keyword of seeder.Checkpoint"
    )


class Checkpoint:
    """One checkpoint file for a plain loop: see the module documentation.

    Args:
        path: the file (its directory is created on the first save).
        model: what ``state_dict()``/``load_state_dict()`` save and load (an ``nn.Module``), or
            ``None``.
        optimizer: its optimizer, or ``None``.
        scheduler: an LR scheduler (anything with ``state_dict()``/``load_state_dict()``), or
            ``None``.
        every_steps: ``step()`` saves every this many steps (0: only verify's stop and
            ``save()`` do).
        seeder: the seeder whose state goes with it (default: the module-level one).
        values: tensors and plain values the script reads back after a resume (an RNN's hidden
            state, the best loss so far), by name: their values in a fresh run. The script
            keeps :attr:`values` up to date before each save and reads it after ``resume()``.
        **objects: more objects with ``state_dict()``/``load_state_dict()``, by name: a second
            model and its optimizer, an EMA, a ``GradScaler`` (``None``: left out). The names
            ``objects``, ``step``, ``format`` and ``version`` are the file's own.

    Attributes:
        steps: optimizer steps of the run so far, those of the run it resumed included
            (``step()`` adds one). After ``resume()``, the step the checkpoint was saved at: an
            iteration-based loop starts there (``for iter_num in range(ckpt.steps, max_iters)``).
        values: the dict of plain values and tensors saved with the objects (see ``values``).

    Raises:
        TypeError: a path that is no file path, an object without
            ``state_dict()``/``load_state_dict()``, or a value a checkpoint cannot hold.
        ValueError: a path that names a directory, a reserved name, or a negative
            ``every_steps``.

    Example:
        >>> import os, tempfile, torch, seeder
        >>> seeder.init(master_seed=3)
        >>> net = torch.nn.Linear(2, 1); ema = torch.optim.swa_utils.AveragedModel(net)
        >>> ckpt = seeder.Checkpoint(os.path.join(tempfile.mkdtemp(), "last.pt"), model=net,
        ...                          ema=ema, values={"best_loss": float("inf")})
        >>> ckpt.steps, list(ckpt.objects), ckpt.values["best_loss"]
        (0, ['model', 'ema'], inf)
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        model: Optional[torch.nn.Module] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        scheduler: Any = None,
        every_steps: int = 0,
        seeder: Optional[Seeder] = None,
        values: Optional[Mapping[str, Any]] = None,
        **objects: Any,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        named = {"model": model, "optimizer": optimizer, "scheduler": scheduler, **objects}
        for name, obj in named.items():
            if name in RESERVED:
                raise ValueError(
                    f"{name}= is a name of the checkpoint file's own ({sorted(RESERVED)}); give "
                    "the object another name"
                )
            if obj is not None and not _stateful(obj):
                what = "a torch " + name if name in LEGACY_NAMES else "a model, optimizer, EMA"
                raise TypeError(
                    f"{name} must have state_dict()/load_state_dict() ({what}), got "
                    f"{type(obj).__name__} {obj!r:.80}; tensors and plain values go in "
                    f"values={{{name!r}: ...}}"
                )
        self.path = os.fspath(path)
        if self.path.endswith(("/", os.sep)) or os.path.isdir(self.path):
            raise ValueError(
                f"path {self.path!r} names a directory; pass the checkpoint "
                f"file's path (e.g. {os.path.join(self.path, 'last.pt')!r})"
            )
        if values is None:
            values = {}
        if not isinstance(values, Mapping) or not all(isinstance(k, str) for k in values):
            raise TypeError(
                "values must be a dict of names (str) to tensors and plain values, got "
                f"{values!r:.80}"
            )
        for key, value in values.items():
            _check_value(value, f"values[{key!r}]")
        self._objects = {name: obj for name, obj in named.items() if obj is not None}
        self.values: dict[str, Any] = dict(values)
        self.every_steps = check_int(every_steps, "every_steps", low=0)
        self.seeder = resolve_seeder(seeder)
        self.steps = 0  # optimizer steps of the run, restored ones included (public: see above)
        hooks.emit(hooks.CHECKPOINT, checkpoint=self)  # for a tool, step() is the step

    @property
    def objects(self) -> Mapping[str, Any]:
        """The objects saved and loaded, by name, in the order they save and load (read-only).

        Example:
            >>> import os, tempfile, torch
            >>> g, d = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
            >>> ckpt = Checkpoint(os.path.join(tempfile.mkdtemp(), "gan.pt"), netG=g, netD=d)
            >>> list(ckpt.objects), ckpt.objects["netD"] is d
            (['netG', 'netD'], True)
        """
        return MappingProxyType(self._objects)

    def _set(self, name: str, obj: Any) -> None:
        if obj is not None and not _stateful(obj):
            raise TypeError(f"{name} must have state_dict()/load_state_dict(), got {obj!r:.80}")
        if obj is None:
            self._objects.pop(name, None)
        else:
            self._objects[name] = obj

    @property
    def model(self) -> Any:
        """``objects["model"]`` (``None`` when there is none); assigning replaces it."""
        return self._objects.get("model")

    @model.setter
    def model(self, obj: Any) -> None:
        self._set("model", obj)

    @property
    def optimizer(self) -> Any:
        """``objects["optimizer"]`` (``None`` when there is none); assigning replaces it."""
        return self._objects.get("optimizer")

    @optimizer.setter
    def optimizer(self, obj: Any) -> None:
        self._set("optimizer", obj)

    @property
    def scheduler(self) -> Any:
        """``objects["scheduler"]`` (``None`` when there is none); assigning replaces it."""
        return self._objects.get("scheduler")

    @scheduler.setter
    def scheduler(self, obj: Any) -> None:
        self._set("scheduler", obj)

    def _rank(self) -> int:
        return self.seeder.rank if self.seeder.initialized else 0

    def save(self) -> None:
        """Write every object's state, the values and the seeder state atomically.

        Under ``torch.distributed`` every rank calls it (the seeder states of all ranks are
        gathered) and rank 0 writes. Two processes saving to one path do not disturb each other:
        the last whole save wins.

        Raises:
            RuntimeError: the seeder was not initialised, or its last reseed raised.
            TypeError: :attr:`values` holds something a checkpoint cannot (nothing is written).
            OSError: the file cannot be written; the file already there is unchanged.

        Example:
            >>> import os, tempfile, torch, seeder
            >>> seeder.init(master_seed=3); seeder.reseed(1, 0)
            >>> path = os.path.join(tempfile.mkdtemp(), "last.pt")
            >>> Checkpoint(path, model=torch.nn.Linear(2, 1)).save(); os.path.exists(path)
            True
        """
        for key, value in self.values.items():
            _check_value(value, f"values[{key!r}]")
        gathered = (
            self.seeder.gather_state_dict() if process_group_active() else self.seeder.state_dict()
        )
        if self._rank() != 0:
            return
        state: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "objects": {name: class_name(obj) for name, obj in self._objects.items()},
        }
        for name, obj in self._objects.items():
            state[name] = obj.state_dict()
        state.update(values=dict(self.values), seeder=gathered, step=self.steps)
        buf = io.BytesIO()
        torch.save(state, buf)
        write_atomic(self.path, buf.getvalue())

    def resume(self, enabled: Optional[bool] = None) -> int:
        """Load the file (``enabled=None``: only when a tool that started the run asks, as
        ``seeder verify`` does in the runs it resumes); return the epoch to start at.

        The whole file is read and every part checked against the objects, the values and the
        seeder before any of them loads: a refused file changes nothing. The objects then load in
        their order, each from a copy of its state taken just before: an object whose
        ``load_state_dict`` raises (or a Ctrl-C) puts back the ones loaded before it. Sets
        :attr:`steps` to the step the checkpoint was saved at and :attr:`values` to the saved
        values (unchanged when nothing is loaded). A checkpoint of another master seed than the one
        this run was given warns (:class:`seeder.SeederWarning`) naming the seed the run follows
        from here: the checkpoint's.

        Args:
            enabled: ``True`` loads the file, ``False`` does nothing, ``None`` loads it only when
                a tool asks (:data:`seeder._hooks.RESUME`; never in a plain run).

        Returns:
            The epoch to start at: the epoch of the last ``reseed(1, epoch)`` saved, else 0.

        Raises:
            TypeError: ``enabled`` is not ``True``, ``False`` or ``None``.
            FileNotFoundError: there is no file to resume from.
            seeder.StateError: the file is empty, truncated, not a checkpoint, or a part does not
                fit (another model, another optimizer class, an object or value missing or extra).

        Example:
            >>> import os, tempfile, torch, seeder
            >>> seeder.init(master_seed=3); seeder.reseed(1, 2)
            >>> net = torch.nn.Linear(2, 1); path = os.path.join(tempfile.mkdtemp(), "last.pt")
            >>> Checkpoint(path, model=net, values={"best": 0.5}).save()
            >>> again = Checkpoint(path, model=net, values={"best": float("inf")})
            >>> again.resume(True), again.values["best"], Checkpoint(path, model=net).resume(False)
            (2, 0.5, 0)
        """
        if enabled is None:
            enabled = bool(hooks.ask(hooks.RESUME))
        elif not is_bool(enabled):
            raise TypeError(
                f"resume() takes True, False or None (resume when a tool such as seeder verify "
                f"asks), "
                f"got {type(enabled).__name__} {enabled!r}"
            )
        if not enabled:
            return 0
        state = read_checkpoint(self.path)
        steps = check_checkpoint(state, self.path, self._objects, self.values, self.seeder)
        given = self.seeder.get_master_seed() if self.seeder.explicit else None
        values = {k: _placed(state["values"][k], self.values[k]) for k in self.values}
        # checked whole: a Ctrl-C would leave only some parts loaded; the seeder's own warning of
        # another seed is the one below, which names the file
        with interrupts_deferred(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "init\\(\\) got master seed", SeederWarning)
            undo: list[tuple[Any, Any]] = []
            try:
                for name, obj in self._objects.items():
                    undo.append((obj, _copy_state(obj)))
                    obj.load_state_dict(state[name])
                self.seeder.load_state_dict(state["seeder"])
            except BaseException:
                _put_back(undo, self.path)
                raise
            self.values.clear()
            self.values.update(values)
            self.steps = steps
        hooks.emit(hooks.RESUMED, step=self.steps)
        last = self.seeder.last_reseed
        logger.info("resumed from %s after step %d", self.path, self.steps)
        theirs = self.seeder.get_master_seed()
        if given is not None and given != theirs:
            warnings.warn(
                f"{self.path} was saved by a run of master seed {theirs}: this run follows master "
                f"seed {theirs} from here, not {given} that it was started with (the checkpoint's "
                f"seed continues the saved run exactly; start without resuming to train with seed "
                f"{given})",
                SeederWarning,
                stacklevel=2,
            )
        return last[1] if last is not None and last[0] == 1 else 0

    def step(self) -> None:
        """Count an optimizer step: call it after each one.

        Saves every ``every_steps`` steps. The tools that started the run hear of the step
        (:data:`seeder._hooks.STEP`, with :meth:`save`): ``seeder verify``'s hook records it and,
        at the stop it asks for, saves and ends the run with status 0.

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
        hooks.emit(hooks.STEP, seeder=self.seeder, checkpoint=self, save=self.save, end=None)
        if self.every_steps and self.steps % self.every_steps == 0:
            self.save()


def _put_back(undo: list[tuple[Any, Any]], path: str) -> None:
    """Load each ``(object, copy of its state)`` of ``undo`` back, last first; log a failure."""
    for obj, saved in reversed(undo):
        try:
            obj.load_state_dict(saved)
        except Exception as exc:  # the others are put back all the same; the first error is raised
            logger.error(
                "resuming from %s failed, and its %s could not be put back as it was (%s: %s)",
                path,
                type(obj).__name__,
                type(exc).__name__,
                exc,
            )


def _cpu_copy(x: Any, depth: int = 0) -> Any:
    """A copy of a state with its tensors copied to the CPU (a dict's attributes kept: a module's
    state dict carries its version metadata)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", copy=True)
    if depth > 32:
        return copy.deepcopy(x)
    if isinstance(x, dict):
        out = copy.copy(x)
        for k, v in x.items():
            out[k] = _cpu_copy(v, depth + 1)
        return out
    if type(x) in (list, tuple):
        return type(x)(_cpu_copy(v, depth + 1) for v in x)
    return copy.deepcopy(x)


def _copy_state(obj: Any) -> Any:
    """A copy of ``obj``'s state to put back: tensors of modules and optimizers on the CPU (no
    second copy of the weights on the accelerator), other objects' deep-copied as they are."""
    if isinstance(obj, (torch.nn.Module, torch.optim.Optimizer)):
        return _cpu_copy(obj.state_dict())
    return copy.deepcopy(obj.state_dict())


def _placed(saved: Any, own: Any, depth: int = 0) -> Any:
    """``saved`` (loaded on the CPU) with its tensors on the devices of ``own``'s."""
    if isinstance(own, torch.Tensor) and isinstance(saved, torch.Tensor):
        return saved.to(own.device)
    if depth > 32:
        return saved
    if isinstance(own, Mapping) and isinstance(saved, dict):
        return {k: _placed(v, own[k], depth + 1) if k in own else v for k, v in saved.items()}
    if isinstance(own, (list, tuple)) and type(saved) in (list, tuple) and len(own) == len(saved):
        return type(saved)(_placed(v, o, depth + 1) for v, o in zip(saved, own))
    return saved
