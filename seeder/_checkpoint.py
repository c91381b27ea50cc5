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
changed), ``resume(False)`` does nothing, ``resume()`` loads only in a run that ``seeder
verify`` resumes. Loading uses ``torch.load(weights_only=True)``.

Reading the file is :func:`read_checkpoint`: every way a file can be unreadable (missing, a
directory, empty, truncated, not a checkpoint) becomes one error that names the file and what is
wrong. :func:`check_checkpoint` checks every part before anything loads: each object's class
(an optimizer saved as ``Adam`` is refused by an ``SGD``), a module's keys, shapes and dtypes
against its own state (:func:`check_model_state`), an optimizer's parameter groups and, for
torch's optimizers, the shapes of their per-parameter state (:func:`check_optimizer_state`), the
tensors (dtypes, shapes) and kinds of value in other objects' states, the values' kinds, an object
or value missing or extra, the step's type, and the seeder part with seeder's own validation,
which applies nothing. The objects then load in order, each from a copy of its state taken just
before, so a ``load_state_dict`` that raises half-way puts back those loaded before it.

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

from seeder._atomic import write_atomic
from seeder._checks import check_int, is_bool, is_int
from seeder._errors import SeederWarning, StateError
from seeder._run import steps as stepwatch
from seeder._run.where import caller_variables
from seeder._seeding.core import Seeder
from seeder._seeding.default import resolve_seeder
from seeder._seeding.distributed import process_group_active
from seeder._state.rollback import interrupts_deferred

__all__ = [
    "Checkpoint",
    "REQUIRED_KEYS",
    "RESERVED",
    "FORMAT",
    "VERSION",
    "read_checkpoint",
    "check_checkpoint",
    "check_model_state",
    "check_optimizer_state",
]

logger = logging.getLogger("seeder")


#: Names a named object cannot take: the file's own keys.
RESERVED = frozenset({"objects", "values", "seeder", "step", "format", "version"})
#: The objects of a file written before named objects, in their order (``None``: not saved).
_LEGACY_NAMES = ("model", "optimizer", "scheduler")

_ABSENT: Any = object()


def _stateful(obj: Any) -> bool:
    return hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")


def _class_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


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
        f"{where} is a {_class_name(value)}: a checkpoint's values are tensors, numbers, strings, "
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
                what = "a torch " + name if name in _LEGACY_NAMES else "a model, optimizer, EMA"
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
        stepwatch.checkpoint_counts()  # under seeder verify, step() is the step

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
            "objects": {name: _class_name(obj) for name, obj in self._objects.items()},
        }
        for name, obj in self._objects.items():
            state[name] = obj.state_dict()
        state.update(values=dict(self.values), seeder=gathered, step=self.steps)
        buf = io.BytesIO()
        torch.save(state, buf)
        write_atomic(self.path, buf.getvalue())

    def resume(self, enabled: Optional[bool] = None) -> int:
        """Load the file (``enabled=None``: only when ``seeder verify`` resumes this run); return
        the epoch to start at.

        The whole file is read and every part checked against the objects, the values and the
        seeder before any of them loads: a refused file changes nothing. The objects then load in
        their order, each from a copy of its state taken just before: an object whose
        ``load_state_dict`` raises (or a Ctrl-C) puts back the ones loaded before it. Sets
        :attr:`steps` to the step the checkpoint was saved at and :attr:`values` to the saved
        values (unchanged when nothing is loaded). A checkpoint of another master seed than the one
        this run was given warns (:class:`seeder.SeederWarning`) naming the seed the run follows
        from here: the checkpoint's.

        Args:
            enabled: ``True`` loads the file, ``False`` does nothing, ``None`` loads it only in a
                run that ``seeder verify`` resumes.

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
            enabled = stepwatch.resume_requested()
        elif not is_bool(enabled):
            raise TypeError(
                f"resume() takes True, False or None (resume when seeder verify asks), "
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
        stepwatch.mark("resumed", self.steps)
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
    """What ``seeder verify`` compares after a step: the objects of the caller's variables, the
    checkpoint's named objects and its tensor and number values (:mod:`seeder._run.objects`)."""
    from seeder._run.objects import objects_in

    own = {f"checkpoint {name}": obj for name, obj in ckpt.objects.items()}
    values = {
        f"checkpoint values[{k!r}]": v
        for k, v in ckpt.values.items()
        if isinstance(v, (torch.Tensor, int, float))
    }
    return {**objects_in({**names, **own}), **values}


#: The keys every checkpoint file ``seeder.Checkpoint.save`` writes has, besides its objects'.
REQUIRED_KEYS = frozenset({"seeder", "step"})
#: ``format`` and ``version`` of the files ``seeder.Checkpoint.save`` writes (a file without them
#: holds ``model``, ``optimizer`` and ``scheduler``, ``None`` for one not saved).
FORMAT, VERSION = "seeder.checkpoint", 2
_FIX = "resume from an earlier checkpoint, or start without resuming"


def read_checkpoint(path: str) -> dict[str, Any]:
    """The dict in the checkpoint file ``path`` (``torch.load(weights_only=True)`` on the CPU).

    Args:
        path: the file ``seeder.Checkpoint.save`` wrote.

    Returns:
        The dict: :data:`REQUIRED_KEYS`, ``objects`` (each name's class), each object's state by
        its name and ``values``; or, from a file without ``objects``, ``model``, ``optimizer`` and
        ``scheduler``.

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
    named = state.get("objects")
    if "objects" in state and not (
        isinstance(named, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in named.items())
    ):
        raise StateError(
            f"the checkpoint {path}: 'objects' must map names to class names, got {named!r:.80}; "
            f"{_FIX}"
        )
    need = REQUIRED_KEYS | (set(named) | {"values"} if named is not None else set(_LEGACY_NAMES))
    missing = sorted(need - set(state))
    if missing:
        raise StateError(
            f"the checkpoint {path} has no {', '.join(repr(k) for k in missing)} (it has "
            f"{sorted(map(str, state))}), so seeder.Checkpoint did not write it; {_FIX}"
        )
    if named is not None and not isinstance(state["values"], dict):
        raise StateError(
            f"the checkpoint {path}: 'values' is a {type(state['values']).__name__}, not a dict; "
            f"{_FIX}"
        )
    return state


def _saved_objects(state: dict[str, Any]) -> dict[str, tuple[Optional[str], Any]]:
    """``{name: (class name or None, state)}`` of a :func:`read_checkpoint` dict's objects."""
    named = state.get("objects")
    if named is None:  # a file without names: model, optimizer, scheduler (None: not saved)
        return {n: (None, state[n]) for n in _LEGACY_NAMES if state[n] is not None}
    return {n: (cls, state[n]) for n, cls in named.items()}


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ("," if t.dim() == 1 else "") + ")"


def check_model_state(saved: Any, model: torch.nn.Module, path: str, name: str = "model") -> None:
    """Raise :class:`StateError` unless ``saved`` has ``model.state_dict()``'s keys, shapes, dtypes.

    Args:
        saved: the checkpoint's part for the module.
        model: the module it loads into.
        path: the file, for the messages.
        name: the module's name in the checkpoint, for the messages.

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
    fix = f"build the {name} as the run that saved it did"
    if not isinstance(saved, Mapping):
        raise StateError(f"{path}: the {name} part is a {type(saved).__name__}, not a state dict")
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or extra:
        raise StateError(
            f"{path}: the {name}'s keys differ: missing {missing[:5]}, unexpected {extra[:5]}; "
            f"{fix}"
        )
    for key, mine in own.items():
        if not isinstance(mine, torch.Tensor):
            continue
        theirs = saved[key]
        if not isinstance(theirs, torch.Tensor):
            raise StateError(
                f"{path}: the {name}'s {key!r} is a {type(theirs).__name__} in the checkpoint, "
                "not a tensor"
            )
        if theirs.shape != mine.shape:
            raise StateError(
                f"{path}: the {name}'s {key!r} has shape {_shape(theirs)} in the checkpoint but "
                f"{_shape(mine)} in the {name}; {fix}"
            )
        if theirs.dtype != mine.dtype:
            raise StateError(
                f"{path}: the {name}'s {key!r} is {theirs.dtype} in the checkpoint but "
                f"{mine.dtype} in the {name}; convert it ({name}.to(dtype)) as the run that "
                "saved it did"
            )


def _params(optimizer: torch.optim.Optimizer) -> list[list[torch.Tensor]]:
    return [list(group["params"]) for group in optimizer.param_groups]


def check_optimizer_state(
    saved: Any, optimizer: torch.optim.Optimizer, path: str, name: str = "optimizer"
) -> None:
    """Raise :class:`StateError` unless ``saved`` fits ``optimizer``: its parameter groups and their
    sizes, and for torch's optimizers (LBFGS aside) each parameter's state tensors of its shape.

    Args:
        saved: the checkpoint's part for the optimizer.
        optimizer: the optimizer it loads into.
        path: the file, for the messages.
        name: the optimizer's name in the checkpoint, for the messages.

    Raises:
        StateError: what does not fit, named.
    """
    fix = f"build the {name} over the same parameters as the run that saved it"
    if not (
        isinstance(saved, Mapping)
        and isinstance(saved.get("param_groups"), list)
        and isinstance(saved.get("state"), Mapping)
    ):
        raise StateError(
            f"{path}: the {name} part is not an optimizer state dict (state and param_groups)"
        )
    groups, theirs = _params(optimizer), saved["param_groups"]
    if len(theirs) != len(groups):
        raise StateError(
            f"{path}: the {name} has {len(theirs)} parameter group(s) in the checkpoint but "
            f"{len(groups)} here; {fix}"
        )
    ids: dict[Any, torch.Tensor] = {}
    for i, (group, mine) in enumerate(zip(theirs, groups)):
        if not (isinstance(group, Mapping) and isinstance(group.get("params"), list)):
            raise StateError(f"{path}: the {name}'s parameter group {i} has no list of params")
        if len(group["params"]) != len(mine):
            raise StateError(
                f"{path}: the {name}'s parameter group {i} has {len(group['params'])} "
                f"parameters in the checkpoint but {len(mine)} here; {fix}"
            )
        ids.update(zip(group["params"], mine))
    shaped = type(optimizer).__module__.startswith("torch.optim") and not isinstance(
        optimizer, torch.optim.LBFGS
    )
    for pid, entry in saved["state"].items():
        if pid not in ids:
            raise StateError(
                f"{path}: the {name}'s state names parameter {pid!r}, which no parameter "
                "group holds"
            )
        if not (shaped and isinstance(entry, Mapping)):
            continue
        param = ids[pid]
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise StateError(
                    f"{path}: the {name}'s {key!r} of parameter {pid!r} has shape "
                    f"{_shape(value)} but the parameter has {_shape(param)}; {fix}"
                )


def _check_like(
    saved: Any, own: Any, where: str, path: str, shapes: bool = False, depth: int = 0
) -> None:
    """Raise :class:`StateError` unless ``saved`` is of ``own``'s kind: a tensor of its dtype and
    number of dimensions (``shapes``: of its shape, and lists of tensors of its length), a number,
    a string, a container of the same type whose common entries are alike (``own`` ``None``:
    anything)."""
    fix = "resume with the script (and arguments) that saved it"
    if own is None or depth > 32:
        return
    if isinstance(own, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            raise StateError(
                f"{path}: {where} is a {type(saved).__name__} in the checkpoint, a tensor here; "
                f"{fix}"
            )
        if (
            saved.dtype != own.dtype
            or saved.dim() != own.dim()
            or (shapes and saved.shape != own.shape)
        ):
            raise StateError(
                f"{path}: {where} is a {saved.dtype} tensor of shape {_shape(saved)} in the "
                f"checkpoint, a {own.dtype} tensor of shape {_shape(own)} here; {fix}"
            )
        return
    if isinstance(own, bool) or isinstance(saved, bool):
        ok = isinstance(own, bool) and isinstance(saved, bool)
    elif isinstance(own, (int, float)):
        ok = isinstance(saved, (int, float)) and (isinstance(own, float) or isinstance(saved, int))
    elif isinstance(own, Mapping):
        ok = isinstance(saved, Mapping)
    elif isinstance(own, (list, tuple)):
        ok = isinstance(saved, (list, tuple)) and isinstance(saved, tuple) == isinstance(own, tuple)
    else:
        ok = isinstance(saved, type(own))
    if not ok:
        raise StateError(
            f"{path}: {where} is a {type(saved).__name__} in the checkpoint, a "
            f"{type(own).__name__} here; {fix}"
        )
    if isinstance(own, Mapping):
        for key in own:
            if key in saved:
                _check_like(saved[key], own[key], f"{where}[{key!r}]", path, shapes, depth + 1)
    elif isinstance(own, (list, tuple)):
        if len(own) == len(saved):
            for i, (a, b) in enumerate(zip(saved, own)):
                _check_like(a, b, f"{where}[{i}]", path, shapes, depth + 1)
        elif shapes and any(isinstance(x, torch.Tensor) for x in (*own, *saved)):
            raise StateError(
                f"{path}: {where} holds {len(saved)} entries in the checkpoint, {len(own)} here; "
                f"{fix}"
            )


def _check_object(saved: Any, cls: Optional[str], obj: Any, name: str, path: str) -> None:
    """Raise :class:`StateError` unless ``saved`` (of an object of class ``cls``) fits ``obj``."""
    # a module is checked by its keys, shapes and dtypes (a subclass or wrapper of it may load it)
    module = isinstance(obj, torch.nn.Module)
    if cls is not None and not module and not cls.endswith("." + type(obj).__qualname__):
        raise StateError(
            f"{path}: {name!r} was saved from a {cls}, this run's {name} is a {_class_name(obj)}: "
            f"its state does not fit; build the {name} as the run that saved it did, or start "
            "without resuming"
        )
    if module:
        check_model_state(saved, obj, path, name)
    elif isinstance(obj, torch.optim.Optimizer):
        check_optimizer_state(saved, obj, path, name)
    else:
        own = obj.state_dict()
        if isinstance(own, Mapping) and not isinstance(saved, Mapping):
            raise StateError(
                f"{path}: the {name} part is a {type(saved).__name__}, not a state dict"
            )
        _check_like(saved, own, f"the {name}'s state", path, shapes=True)


def check_checkpoint(
    state: dict[str, Any],
    path: str,
    objects: Mapping[str, Any],
    values: Mapping[str, Any],
    seeder: Seeder,
) -> int:
    """Check every part of a :func:`read_checkpoint` dict before anything loads; return its step.

    Args:
        state: the file's dict.
        path: the file, for the messages.
        objects: the objects the parts load into, by name.
        values: the values of this run (their fresh values), by name.
        seeder: the :class:`seeder.Seeder` whose ``check_state_dict`` checks the seeder part.

    Returns:
        The optimizer steps the file was saved after.

    Raises:
        StateError: a part does not fit, is missing or has no object here; nothing was changed.
    """
    step = state["step"]
    if not is_int(step) or step < 0:
        raise StateError(
            f"{path}: 'step' must be a non-negative int, got {type(step).__name__} {step!r}"
        )
    saved = _saved_objects(state)
    for name in objects:
        if name not in saved:
            raise StateError(
                f"{path} holds no {name} state, but this run has a {name}: its state would start "
                f"fresh; resume with a checkpoint saved with the {name}, or build the Checkpoint "
                f"without {name}="
            )
    for name in saved:
        if name not in objects:
            raise StateError(
                f"{path} holds the state of {name!r} ({saved[name][0] or 'an object'}), which "
                f"this Checkpoint has no object for: it would not be loaded; pass {name}=... to "
                "seeder.Checkpoint as the run that saved it did"
            )
    for name, obj in objects.items():
        _check_object(saved[name][1], saved[name][0], obj, name, path)
    theirs = state.get("values", {})
    if set(theirs) != set(values):
        missing, extra = sorted(set(values) - set(theirs)), sorted(set(theirs) - set(values))
        raise StateError(
            f"{path}: the values differ: missing {missing} (they would start fresh), not given "
            f"here {extra} (they would not be read back); pass values= with the names of the run "
            "that saved it"
        )
    for key, own in values.items():
        _check_like(theirs[key], own, f"values[{key!r}]", path)
    try:
        seeder.check_state_dict(state["seeder"])
    except StateError as exc:
        raise StateError(f"{path}: the seeder part: {exc}") from None
    return int(step)


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
