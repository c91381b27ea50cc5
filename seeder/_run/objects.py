"""What a step of a run leaves in memory, as ``seeder verify`` compares it: one digest per object.

Under ``seeder verify``, each ``seeder.Checkpoint.step()`` records a digest of every object
in reach of the training loop (:mod:`seeder._run.steps`): the objects the checkpoint holds
and every ``nn.Module`` (its parameters and buffers, non-persistent ones included),
optimizer, LR scheduler, ``torch.Generator`` and other object with
``state_dict()``/``load_state_dict()`` (an EMA, a grad scaler) bound to a variable of the
function that called ``step()``. Two runs that
agree bit for bit give equal digests at every step; the first step at which an object's
digest differs, and its name, are what verify reports.

A plain object of the script's own (an instance of a class defined in the script or its
project, not in the standard library or an installed package) that holds a tensor, or a module
no other variable names, is looked into one level: each of its tensor and number attributes
(a list, tuple or dict of them too) and each such module is compared on its own, named
``'name.attr'`` (an ``EMA`` class with no ``state_dict``, a dataclass holding a running loss).
Attributes are taken in name order, at most :data:`MAX_ATTRIBUTES` of an object; callables,
Python modules, other objects and attributes named like times (``start_time``, ``elapsed``)
are left out, and so are an object holding only numbers (a meter of printed averages) and a
dataset, sampler or loader (the data, not the training's state).

Under Lightning's ``Trainer`` or Hugging Face's ``Trainer``, which call no
``seeder.Checkpoint.step()``, each optimizer step records the trainer's model, optimizers and
LR schedulers (:func:`framework_objects`, the trainer found in the frames of the step).

Objects of seeder's own (loaders, samplers, the seeder) are left out: their state holds
the run's position and its files, which the checkpoint already restores and verify checks
through the per-step values.

Example:
    >>> import torch
    >>> net, ema = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    >>> found = objects_in({"net": net, "ema": ema, "lr": 0.1, "torch": torch})
    >>> sorted(found), sorted(digests(found)) == sorted(found)
    (['ema', 'net'], True)
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import sysconfig
import types
from collections.abc import Mapping
from typing import Any, Optional

__all__ = [
    "objects_in",
    "digests",
    "digest",
    "kind_of",
    "parameter_square_sum",
    "MAX_ATTRIBUTES",
    "Attribute",
    "framework_objects",
]

#: At most this many attributes of one plain object are compared (the first in name order).
MAX_ATTRIBUTES = 64
#: At most this many items of a list, tuple or dict attribute (a larger one is left out).
_MAX_ITEMS = 4096
#: Attributes named like times differ between runs by design.
_TIME_NAMES = re.compile(r"(time|timestamp|date|duration|elapsed|clock)", re.I)


class Attribute:
    """An attribute of a plain object of the script's, as a step's state compares it.

    Attributes:
        value: the attribute's value (a tensor, a number, a container of them, a module).
        owner: the class name of the object that holds it.
    """

    __slots__ = ("value", "owner")

    def __init__(self, value: Any, owner: str):
        self.value, self.owner = value, owner


def _stateful(obj: Any) -> bool:
    """An instance (not a class or a module) whose type has ``state_dict`` and
    ``load_state_dict``."""
    kind = type(obj)
    return (
        not isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType))
        and callable(getattr(kind, "state_dict", None))
        and callable(getattr(kind, "load_state_dict", None))
        and not (getattr(kind, "__module__", "") or "").startswith("seeder.")
        and not (getattr(kind, "__module__", "") or "") == "seeder"
    )


def _generator(obj: Any) -> bool:
    """A ``torch.Generator`` (compared by its state: one seeded from the clock differs at once)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Generator)


def objects_in(names: Mapping[str, Any]) -> dict[str, Any]:
    """The objects of ``names`` (a function's locals, a checkpoint's parts) that a step's state
    covers: anything with ``state_dict()``/``load_state_dict()`` that is not seeder's, every
    ``torch.Generator``, and the attributes of the script's plain objects (as :class:`Attribute`,
    named ``'name.attr'``).

    Args:
        names: variable names and their values.

    Returns:
        ``{name: object}``, each object once (under its first name).

    Example:
        >>> import torch
        >>> class EMA:  # no state_dict
        ...     def __init__(self):
        ...         self.shadow, self.decay, self.update = torch.zeros(2), 0.9, print
        >>> EMA.__module__ = "__main__"  # a class of the script's
        >>> sorted(objects_in({"ema": EMA()}))
        ['ema.decay', 'ema.shadow']
    """
    found: dict[str, Any] = {}
    seen: set[int] = set()
    plain: list[tuple[str, Any]] = []
    for name, value in names.items():
        if not isinstance(name, str) or name.startswith("__") or id(value) in seen:
            continue
        try:
            keep = _stateful(value) or _generator(value)
        except Exception:  # an object whose attributes raise: not one a loop trains
            keep = False
        if keep:
            found[name] = value
            seen.add(id(value))
        elif _scripts_own(value):
            plain.append((name, value))
    for name, value in plain:  # after every variable: a module keeps its own name
        for attr, item in _attributes(value, seen).items():
            module = _value_kind(item) == "module"  # compared as any module
            found[f"{name}.{attr}"] = item if module else Attribute(item, type(value).__name__)
            seen.add(id(item))
    return found


@functools.lru_cache(maxsize=1)
def _package_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def _scripts_own(obj: Any) -> bool:
    """An instance of a class of the script's or its project's: not a class, function or Python
    module, not of the standard library, an installed package or seeder."""
    if isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType)):
        return False
    if _data(obj):  # the data, not the training's state (and often large)
        return False
    module_name = getattr(type(obj), "__module__", "") or ""
    if module_name == "__main__":
        return True
    if module_name.split(".")[0] in ("seeder", "builtins") or not hasattr(obj, "__dict__"):
        return False
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and not os.path.realpath(path).startswith(_package_roots())


def _data(obj: Any) -> bool:
    """A dataset, sampler or loader (``torch.utils.data``)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    data = torch.utils.data
    return isinstance(obj, (data.Dataset, data.IterableDataset, data.Sampler, data.DataLoader))


def _attributes(obj: Any, seen: set[int]) -> dict[str, Any]:
    """The attributes of a plain object a step's state compares, in name order (at most
    :data:`MAX_ATTRIBUTES`); none unless one of them is a tensor or a module not in ``seen``."""
    try:
        items = sorted(vars(obj).items())
    except TypeError:  # no __dict__
        return {}
    kept: dict[str, Any] = {}
    held = False
    for attr, value in items:
        if attr.startswith("__") or _TIME_NAMES.search(attr) or id(value) in seen:
            continue
        what = _value_kind(value)
        if what is None:
            continue
        held = held or what != "number"
        if len(kept) < MAX_ATTRIBUTES:
            kept[attr] = value
    return kept if held else {}


def _value_kind(value: Any) -> Optional[str]:
    """``"tensor"`` (a tensor, a container of tensors and numbers), ``"module"``, ``"number"``, or
    ``None`` for what is not compared."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, (int, float)):  # bool included
        return "number"
    if isinstance(value, (list, tuple, dict)) and 0 < len(value) <= _MAX_ITEMS:
        items = value.values() if isinstance(value, dict) else value
        kinds = {_value_kind(v) if not isinstance(v, (list, tuple, dict)) else None for v in items}
        if kinds <= {"tensor", "number"}:
            return "tensor" if "tensor" in kinds else "number"
    return None


#: The trainers whose objects an optimizer step records: class (module and name) -> its parts.
_TRAINERS = {
    "lightning.pytorch.trainer.trainer.Trainer": "lightning",
    "pytorch_lightning.trainer.trainer.Trainer": "lightning",
    "transformers.trainer.Trainer": "transformers",
}


def framework_objects(limit: int = 200) -> dict[str, Any]:
    """The model, optimizers and LR schedulers of the Lightning or Hugging Face ``Trainer`` whose
    optimizer step is running: the trainer is the first ``trainer`` or ``self`` variable of that
    kind in the frames of the caller and above (at most ``limit`` frames).

    Args:
        limit: how many frames to look through.

    Returns:
        ``{name: object}`` as :func:`objects_in` gives it (``model``, ``optimizers[0]``,
        ``lr_schedulers[0]`` under Lightning; ``model``, ``optimizer``, ``lr_scheduler`` under
        transformers); empty outside a trainer.

    >>> framework_objects()
    {}
    """
    from seeder._run.where import stack_variables

    for value in stack_variables(("trainer", "self"), depth=1, limit=limit):
        found = _trainer_parts(value)
        if found is not None:
            return objects_in(found)
    return {}


def _trainer_parts(obj: Any) -> Optional[dict[str, Any]]:
    """A trainer's stateful parts by name, or ``None`` for an object that is no trainer."""
    kinds = {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}
    which = next((_TRAINERS[k] for k in kinds if k in _TRAINERS), None)
    if which is None:
        return None
    try:
        if which == "lightning":
            parts = {"model": obj.lightning_module}
            parts.update({f"optimizers[{i}]": o for i, o in enumerate(obj.optimizers)})
            configs = obj.lr_scheduler_configs
            parts.update({f"lr_schedulers[{i}]": c.scheduler for i, c in enumerate(configs)})
        else:
            parts = {
                "model": obj.model,
                "optimizer": obj.optimizer,
                "lr_scheduler": obj.lr_scheduler,
            }
    except Exception:  # a trainer not set up yet: nothing to record
        return {}
    return {k: v for k, v in parts.items() if v is not None}


def kind_of(obj: Any) -> str:
    """What an object is, as a verdict names it: ``nn.Module``, ``optimizer``, ``scheduler`` or its
    class.

    >>> import torch
    >>> kind_of(torch.nn.Linear(1, 1))
    'nn.Module Linear'
    """
    import torch

    name = type(obj).__name__
    if isinstance(obj, torch.Tensor):
        return "tensor"
    if isinstance(obj, torch.Generator):
        return "torch.Generator"
    if isinstance(obj, torch.nn.Module):
        return f"nn.Module {name}"
    if isinstance(obj, torch.optim.Optimizer):
        return f"optimizer {name}"
    if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        return f"scheduler {name}"
    return name


def digests(objects: Mapping[str, Any]) -> dict[str, str]:
    """``{name: "kind:digest"}`` of each object's state (a module's: ``parameters.buffers``, every
    buffer included); an object whose state cannot be hashed is ``"kind:?"`` (named, not
    compared).

    Args:
        objects: what :func:`objects_in` found.

    Returns:
        One string per object.
    """
    import torch

    out: dict[str, str] = {}
    for name, held in objects.items():
        obj = held.value if isinstance(held, Attribute) else held
        try:
            if isinstance(
                obj, torch.nn.Module
            ):  # parameters and buffers apart: a verdict says which
                params = dict(obj.named_parameters())
                value = digest(params)[:24] + "." + digest(dict(obj.named_buffers()))[:24]
            elif isinstance(obj, torch.Generator):
                value = digest(obj.get_state())[:32]
            elif callable(getattr(obj, "state_dict", None)):
                value = digest(obj.state_dict())[:32]
            else:  # a tensor or a plain value the checkpoint holds
                value = digest(obj)[:32]
        except Exception:  # a state of a type digest() does not take: named as not compared
            value = "?"
        kind = kind_of(obj)
        if isinstance(held, Attribute):
            kind += f" attribute of {held.owner}"
        out[name] = f"{kind}:{value}"
    return out


def digest(obj: Any) -> str:
    """A digest of ``obj``'s values: tensors by dtype, shape and bytes (fingerprinted where they
    live, :func:`seeder._run.fingerprint.tensor_print`: a GPU tensor is not copied), dicts by
    their items, objects with ``state_dict()`` as that state.

    >>> import torch
    >>> one, zero = {"a": torch.ones(2)}, {"a": torch.zeros(2)}
    >>> digest(one) == digest({"a": torch.ones(2)}) != digest(zero)
    True

    Raises:
        TypeError: a value of another type.
    """
    parts: list[str] = []
    _walk(obj, parts)
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _walk(obj: Any, parts: list[str]) -> None:
    import torch

    from seeder._run.fingerprint import tensor_print

    if obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        parts.append(f"{type(obj).__name__}:{obj!r}")  # repr of a float is exact
    elif isinstance(obj, torch.Tensor):
        parts.append("T" + tensor_print(obj))
    elif isinstance(obj, dict):
        parts.append(f"{{{len(obj)}")
        for key in sorted(obj, key=repr):
            parts.append(repr(key))
            _walk(obj[key], parts)
    elif isinstance(obj, (list, tuple)):
        parts.append(f"[{len(obj)}")
        for item in obj:
            _walk(item, parts)
    elif callable(getattr(obj, "state_dict", None)):
        _walk(obj.state_dict(), parts)
    else:
        raise TypeError(f"cannot digest a {type(obj).__name__}")


def parameter_square_sum(objects: Mapping[str, Any]) -> float:
    """The sum of squares of every parameter of the modules among ``objects``, in float64 (each
    parameter once): a step's value when the loop steps no torch optimizer.

    >>> import torch
    >>> parameter_square_sum({"m": torch.nn.Linear(1, 1, bias=False).requires_grad_(False)}) >= 0
    True
    """
    import torch

    seen: set[int] = set()
    total = 0.0
    with torch.no_grad():
        for obj in objects.values():
            if not isinstance(obj, torch.nn.Module):
                continue
            for p in obj.parameters():
                if id(p) in seen or not p.is_floating_point():
                    continue
                seen.add(id(p))
                total += float(p.detach().double().pow(2).sum())
    return total
