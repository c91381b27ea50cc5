"""Reading a ``seeder.Checkpoint`` file and checking it whole against the objects it loads into.

:func:`read_checkpoint` turns every way a file can be unreadable (missing, a directory,
empty, truncated, not a checkpoint) into one error that names the file and what is wrong.
:func:`check_checkpoint` checks every part before anything loads: the model's keys, shapes
and dtypes against the model's own state, the optimizer's parameter groups (and, for
torch's optimizers, the shapes of their per-parameter state) against the optimizer's, the
scheduler's and the step's types, and the seeder part with seeder's own validation, which
applies nothing.

Example:
    >>> import io, torch
    >>> net = torch.nn.Linear(2, 1)
    >>> check_model_state({"weight": torch.zeros(1, 3), "bias": torch.zeros(1)}, net, "ckpt.pt")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    seeder._errors.StateError: ckpt.pt: the model's 'weight' has shape (1, 3) in the checkpoint ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from seeder._checks import is_int
from seeder._errors import StateError

__all__ = [
    "REQUIRED_KEYS",
    "read_checkpoint",
    "check_checkpoint",
    "check_model_state",
    "check_optimizer_state",
]

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
    except (
        Exception
    ) as exc:  # torch raises EOFError, RuntimeError, OSError or UnpicklingError by the damage
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


def check_model_state(saved: Any, model: Any, path: str) -> None:
    """Raise :class:`StateError` unless ``saved`` has ``model.state_dict()``'s keys, shapes, dtypes.

    Args:
        saved: the checkpoint's ``"model"`` part.
        model: the module it loads into.
        path: the file, for the messages.

    Raises:
        StateError: a key is missing or unexpected, or a tensor's shape or dtype differs.
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


def _params(optimizer: Any) -> list[list[torch.Tensor]]:
    return [list(group["params"]) for group in optimizer.param_groups]


def check_optimizer_state(saved: Any, optimizer: Any, path: str) -> None:
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
    state: dict[str, Any], path: str, model: Any, optimizer: Any, scheduler: Any, seeder: Any
) -> int:
    """Check every part of a :func:`read_checkpoint` dict before anything loads; return its step.

    Args:
        state: the file's dict.
        path: the file, for the messages.
        model, optimizer, scheduler: what the parts load into (``None``: not loaded).
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
