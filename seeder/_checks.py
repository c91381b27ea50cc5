"""Argument checks shared by every module: one wording for "int but not bool" and friends.

Each check returns the value in its plain Python type or raises ``TypeError`` /
``ValueError`` naming the argument, what it got, and what to pass instead.

Example:
    >>> check_int(3, "epoch", low=0)
    3
    >>> check_bool(True, "shuffle")
    True
"""

from __future__ import annotations

import numbers
from collections.abc import Set
from typing import Any, Optional

from seeder._errors import StateError

__all__ = ["is_int", "is_bool", "check_int", "check_bool", "check_state_header"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer (Python or NumPy) and not a bool.

    >>> is_int(3), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        and type(value).__name__ != "bool_"
    )


def is_bool(value: Any) -> bool:
    """Whether ``value`` is ``True`` or ``False`` (Python's or NumPy's bool).

    >>> import numpy as np
    >>> is_bool(True), is_bool(np.bool_(False)), is_bool(1)
    (True, True, False)
    """
    kind = type(value)
    return kind is bool or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def check_int(
    value: Any, name: str, *, low: Optional[int] = None, high: Optional[int] = None
) -> int:
    """``value`` as an ``int`` if it is an integer in ``[low, high]``, else an error naming
    ``name``.

    >>> check_int(-1, "num_workers", low=0)
    Traceback (most recent call last):
    ...
    ValueError: num_workers must be >= 0, got -1
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if low is not None and high is not None and not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """``value`` if it is ``True`` or ``False`` (NumPy's bool too), else a ``TypeError`` naming
    ``name``.

    >>> import numpy as np; check_bool(np.True_, "shuffle")
    True
    >>> check_bool(1, "drop_last")
    Traceback (most recent call last):
    ...
    TypeError: drop_last must be True or False, got int 1
    """
    if not is_bool(value):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_state_header(
    state: Any, fmt: str, version: int, keys: Set[str], what: str, owner: str = ""
) -> None:
    """Raise :class:`seeder._errors.StateError` unless ``state`` is a dict of format ``fmt``,
    ``version`` and ``keys``.

    ``what`` names the state in the messages (``"sampler"``); ``owner`` the class whose
    ``state_dict()`` makes it (``what`` if not given). Changes nothing.

    >>> check_state_header({"format": "x", "version": 2}, "x", 1, {"format", "version"}, "sampler")
    Traceback (most recent call last):
    ...
    seeder.StateError: sampler state version 2 is not supported (this seeder reads ...
    """
    if not isinstance(state, dict) or state.get("format") != fmt:
        raise StateError(
            f"not a {what} state: pass the dict returned by {owner or what}.state_dict()"
        )
    # True == 1: a version is an int
    if type(state.get("version")) is not int or state.get("version") != version:
        raise StateError(
            f"{what} state version {state.get('version')!r} is not supported (this seeder reads "
            f"version {version}); load it with the seeder version that wrote it"
        )
    if set(state) != keys:
        raise StateError(
            f"{what} state keys differ: missing {sorted(keys - set(state))}, "
            f"unexpected {sorted(set(state) - keys)}"
        )
