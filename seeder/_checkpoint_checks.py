"""A ``seeder.Checkpoint`` file read back and checked, part by part, before anything loads.

:func:`read_checkpoint` turns every way a file can be unreadable (missing, a directory, empty,
truncated, not a checkpoint) into one error that names the file and what is wrong.
:func:`check_checkpoint` checks every part against the objects, values and seeder of the run:
each object's class (an optimizer saved as ``Adam`` is refused by an ``SGD``), a module's keys,
shapes and dtypes (:func:`check_model_state`), an optimizer's parameter groups and, for torch's
optimizers, the shapes of their per-parameter state (:func:`check_optimizer_state`), the tensors
(dtypes, shapes) and kinds of value in other objects' states, the values' kinds, an object or
value missing or extra, the step's type, and the seeder part with seeder's own validation,
which applies nothing.

Example:
    >>> import os, tempfile, torch, seeder
    >>> seeder.init(master_seed=3)
    >>> path = os.path.join(tempfile.mkdtemp(), "last.pt"); net = torch.nn.Linear(2, 1)
    >>> seeder.Checkpoint(path, model=net).save()
    >>> state = read_checkpoint(path)
    >>> check_checkpoint(state, path, {"model": net}, {}, seeder.default_seeder())
    0
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

import torch

from seeder._checks import is_int
from seeder._errors import StateError

if TYPE_CHECKING:
    from seeder._seeding.core import Seeder

__all__ = [
    "REQUIRED_KEYS",
    "LEGACY_NAMES",
    "FORMAT",
    "VERSION",
    "class_name",
    "read_checkpoint",
    "check_checkpoint",
    "check_model_state",
    "check_optimizer_state",
]

#: The objects of a file written before named objects, in their order (``None``: not saved).
LEGACY_NAMES = ("model", "optimizer", "scheduler")


def class_name(obj: Any) -> str:
    """The module and qualified name of ``obj``'s class, as a checkpoint records it.

    >>> class_name(torch.nn.Linear(1, 1))
    'torch.nn.modules.linear.Linear'
    """
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


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
    need = REQUIRED_KEYS | (set(named) | {"values"} if named is not None else set(LEGACY_NAMES))
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
        return {n: (None, state[n]) for n in LEGACY_NAMES if state[n] is not None}
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


def _parameter_ids(
    theirs: list[Any], optimizer: torch.optim.Optimizer, where: str, fix: str
) -> dict[Any, torch.Tensor]:
    """``{saved parameter id: this optimizer's parameter}`` of saved parameter groups that match
    the optimizer's in number and sizes; :class:`StateError` where they do not."""
    groups = _params(optimizer)
    if len(theirs) != len(groups):
        raise StateError(
            f"{where} has {len(theirs)} parameter group(s) in the checkpoint but {len(groups)} "
            f"here; {fix}"
        )
    ids: dict[Any, torch.Tensor] = {}
    for i, (group, mine) in enumerate(zip(theirs, groups)):
        if not (isinstance(group, Mapping) and isinstance(group.get("params"), list)):
            raise StateError(f"{where}'s parameter group {i} has no list of params")
        if len(group["params"]) != len(mine):
            raise StateError(
                f"{where}'s parameter group {i} has {len(group['params'])} parameters in the "
                f"checkpoint but {len(mine)} here; {fix}"
            )
        ids.update(zip(group["params"], mine))
    return ids


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
    ids = _parameter_ids(saved["param_groups"], optimizer, f"{path}: the {name}", fix)
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


_LIKE_FIX = "resume with the script (and arguments) that saved it"


def _check_like(
    saved: Any, own: Any, where: str, path: str, shapes: bool = False, depth: int = 0
) -> None:
    """Raise :class:`StateError` unless ``saved`` is of ``own``'s kind: a tensor of its dtype and
    number of dimensions (``shapes``: of its shape, and lists of tensors of its length), a number,
    a string, a container of the same type whose common entries are alike (``own`` ``None``:
    anything)."""
    if own is None or depth > 32:
        return
    if isinstance(own, torch.Tensor):
        _check_tensor_like(saved, own, where, path, shapes)
        return
    if not _same_kind(saved, own):
        raise StateError(
            f"{path}: {where} is a {type(saved).__name__} in the checkpoint, a "
            f"{type(own).__name__} here; {_LIKE_FIX}"
        )
    if isinstance(own, Mapping):
        for key in own:
            if key in saved:
                _check_like(saved[key], own[key], f"{where}[{key!r}]", path, shapes, depth + 1)
    elif isinstance(own, (list, tuple)):
        _check_items_like(saved, own, where, path, shapes, depth)


def _check_tensor_like(saved: Any, own: torch.Tensor, where: str, path: str, shapes: bool) -> None:
    """:func:`_check_like` of a tensor: a tensor of its dtype and dimensions (``shapes``: shape)."""
    if not isinstance(saved, torch.Tensor):
        raise StateError(
            f"{path}: {where} is a {type(saved).__name__} in the checkpoint, a tensor here; "
            f"{_LIKE_FIX}"
        )
    if (
        saved.dtype != own.dtype
        or saved.dim() != own.dim()
        or (shapes and saved.shape != own.shape)
    ):
        raise StateError(
            f"{path}: {where} is a {saved.dtype} tensor of shape {_shape(saved)} in the "
            f"checkpoint, a {own.dtype} tensor of shape {_shape(own)} here; {_LIKE_FIX}"
        )


def _same_kind(saved: Any, own: Any) -> bool:
    """Whether ``saved`` may stand where ``own`` is: bools for bools, an int for a number (a float
    for a float), a mapping for a mapping, a list or a tuple as ``own`` is, else its type."""
    if isinstance(own, bool) or isinstance(saved, bool):
        return isinstance(own, bool) and isinstance(saved, bool)
    if isinstance(own, (int, float)):
        return isinstance(saved, (int, float)) and (
            isinstance(own, float) or isinstance(saved, int)
        )
    if isinstance(own, Mapping):
        return isinstance(saved, Mapping)
    if isinstance(own, (list, tuple)):
        return isinstance(saved, (list, tuple)) and isinstance(saved, tuple) == isinstance(
            own, tuple
        )
    return isinstance(saved, type(own))


def _check_items_like(
    saved: Any, own: Any, where: str, path: str, shapes: bool, depth: int
) -> None:
    """:func:`_check_like` of a list's or tuple's items, pairwise; with ``shapes``, a list holding
    tensors must have ``own``'s length."""
    if len(own) == len(saved):
        for i, (a, b) in enumerate(zip(saved, own)):
            _check_like(a, b, f"{where}[{i}]", path, shapes, depth + 1)
    elif shapes and any(isinstance(x, torch.Tensor) for x in (*own, *saved)):
        raise StateError(
            f"{path}: {where} holds {len(saved)} entries in the checkpoint, {len(own)} here; "
            f"{_LIKE_FIX}"
        )


def _check_object(saved: Any, cls: Optional[str], obj: Any, name: str, path: str) -> None:
    """Raise :class:`StateError` unless ``saved`` (of an object of class ``cls``) fits ``obj``."""
    # a module is checked by its keys, shapes and dtypes (a subclass or wrapper of it may load it)
    module = isinstance(obj, torch.nn.Module)
    if cls is not None and not module and not cls.endswith("." + type(obj).__qualname__):
        raise StateError(
            f"{path}: {name!r} was saved from a {cls}, this run's {name} is a {class_name(obj)}: "
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
