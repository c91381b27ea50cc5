"""Where in the user's code an operator ran, for ``seeder locate``: the call stack, read by a tool.

``seeder locate`` names the user's file and line of the first operation that differs
between two runs, so it reads the call stack of each operation in its localisation runs
(never in a training run that is not being located). Frames of torch and seeder are
skipped: the line shown is the innermost one of the user's code (the script, or a
library the user called). A frame of torch's data loading on the way says that the
operation belongs to fetching a batch, and which dataset it was fetched from.

Example:
    >>> here = user_site()
    >>> here.line.startswith("<doctest") or ":" in here.line, here.in_data
    (True, False)
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import torch

__all__ = [
    "Site",
    "user_site",
    "variable_name",
    "describe_dataset",
    "caller_variables",
    "stack_variables",
]

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep  # pickle, multiprocessing: not the user's line
_SEEDER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_DATA_DIR = os.path.join(_TORCH_DIR, "utils", "data") + os.sep
_SEEDER_DATA_DIR = os.path.join(_SEEDER_DIR, "data") + os.sep
#: torch's tensor sharing between processes: a batch from a DataLoader worker is rebuilt there
_SHARING = os.path.join(_TORCH_DIR, "multiprocessing", "reductions.py")
#: filename -> (skipped: not the user's, data: torch's or seeder's data loading)
_kinds: dict[str, tuple[bool, bool]] = {}


def _kind(filename: str) -> tuple[bool, bool]:
    k = _kinds.get(filename)
    if k is None:
        skipped = (
            filename.startswith((_TORCH_DIR, _SEEDER_DIR))
            or (filename.startswith(_STDLIB_DIR) and "-packages" + os.sep not in filename)
            or filename.startswith("<frozen")
            or os.path.basename(filename) in ("contextlib.py", "functools.py")
        )
        data = filename.startswith((_DATA_DIR, _SEEDER_DATA_DIR)) or filename == _SHARING
        k = _kinds[filename] = (skipped, data)
    return k


@dataclass(frozen=True)
class Site:
    """The user's line an operation ran from, and whether it ran while a batch was fetched."""

    line: str  #: ``path:line`` of the innermost frame outside torch and seeder ('' if none)
    in_data: bool  #: a frame of torch's (or seeder's) data loading is on the stack
    #: the dataset fetched from, when ``in_data`` (its class, file and ``__getitem__`` line)
    dataset: str = ""
    #: a tensor from another process (a DataLoader worker's batch) is being rebuilt: it arrives
    #: when that process is done, in an order that varies from run to run
    arriving: bool = False


def user_site(depth: int = 1) -> Site:
    """The user's line of the current call, and whether a batch is being fetched.

    Args:
        depth: frames to skip above this function's caller.

    Returns:
        A :class:`Site`.
    """
    f: Any = sys._getframe(depth + 1)
    line, in_data, dataset, arriving = "", False, "", False
    while f is not None:
        filename = f.f_code.co_filename
        skipped, data = _kind(filename)
        if data:
            in_data = True
            arriving = arriving or filename == _SHARING
            if not dataset:
                owner = f.f_locals.get("self")
                ds = getattr(owner, "dataset", None) if owner is not None else None
                if isinstance(ds, torch.utils.data.Dataset):
                    dataset = describe_dataset(ds)
        elif not skipped and not line:
            line = f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return Site(line, in_data, dataset, arriving)


def describe_dataset(ds: Any) -> str:
    """A dataset's class and where its ``__getitem__`` (or ``__iter__``) is defined.

    Args:
        ds: a dataset object.

    Returns:
        ``'Noisy (data.py:12, __getitem__)'``, or the class name when the source cannot be found.
    """
    cls = type(ds)
    for method in ("__getitem__", "__iter__"):
        fn = getattr(cls, method, None)
        if fn is None:
            continue
        try:
            where = f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
        except (OSError, TypeError):
            continue
        if not where.startswith((_TORCH_DIR, _SEEDER_DIR)):
            return f"{cls.__qualname__} ({where}, {method})"
    return cls.__qualname__


def variable_name(obj: Any, depth: int = 1) -> Optional[str]:
    """The name the user's innermost frame gives ``obj`` (a local, else a global), or ``None``.

    Args:
        obj: the object to look for (by identity), or a predicate (a function) on values.
        depth: frames to skip above this function's caller.

    Returns:
        The variable name, or ``None`` when no user frame names it.
    """
    f: Any = sys._getframe(depth + 1)
    while f is not None and _kind(f.f_code.co_filename)[0]:
        f = f.f_back
    if f is None:
        return None
    match = obj if inspect.isfunction(obj) else (lambda value: value is obj)
    for scope in (f.f_locals, f.f_globals):
        for name, value in scope.items():
            if not name.startswith("_") and match(value):
                return name
    return None


def caller_variables(depth: int = 1) -> dict[str, Any]:
    """The variables of the user's innermost frame (its locals; at a module's top level, its
    globals): what ``seeder verify`` compares after a ``seeder.Checkpoint`` step.

    Args:
        depth: frames to skip above this function's caller.

    Returns:
        ``{name: value}``, a copy; empty when no user frame is found.

    >>> def loop():
    ...     model = "a model"
    ...     return caller_variables(0)
    >>> loop()["model"]
    'a model'
    """
    f: Any = sys._getframe(depth + 1)
    while f is not None and _kind(f.f_code.co_filename)[0]:
        f = f.f_back
    return dict(f.f_locals) if f is not None else {}


def stack_variables(names: tuple[str, ...], depth: int = 1, limit: int = 200) -> Iterator[Any]:
    """The values of the variables ``names`` in each frame of the call stack, innermost first
    (library frames included): where an optimizer step finds the trainer running it.

    Args:
        names: variable names looked up in each frame, in this order.
        depth: frames to skip above this function's caller.
        limit: how many frames to look through.

    Yields:
        Each value found (not ``None``).

    >>> def step():
    ...     return list(stack_variables(("trainer",), depth=0, limit=2))
    >>> def fit(trainer):
    ...     return step()
    >>> fit("a trainer")
    ['a trainer']
    """
    f: Any = sys._getframe(depth + 1)
    for _ in range(limit):
        if f is None:
            return
        local = f.f_locals
        for name in names:
            value = local.get(name)
            if value is not None:
                yield value
        f = f.f_back
