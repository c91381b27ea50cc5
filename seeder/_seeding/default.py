"""The default :class:`~seeder.Seeder` (behind ``seeder.init``, ``seeder.reseed`` ...) and the one
reading of ``seeder=``.

Every function and class that takes ``seeder=None`` resolves it here: ``None`` is the
default seeder, a :class:`~seeder.Seeder` is itself, anything else is a ``TypeError``.

Example:
    >>> import seeder
    >>> resolve_seeder(None) is default_seeder() is seeder.default_seeder()
    True
    >>> resolve_seeder(42)
    Traceback (most recent call last):
    ...
    TypeError: seeder must be a seeder.Seeder or None (the default seeder), got int 42
"""

from __future__ import annotations

from typing import Any, Optional

from seeder._seeding.core import Seeder

__all__ = ["default_seeder", "check_seeder", "resolve_seeder", "UsesSeeder"]

_DEFAULT: list[Seeder] = []


def default_seeder() -> Seeder:
    """The :class:`Seeder` behind the module-level functions (``seeder.init``, ...).

    Returns:
        The one default seeder, made at the first call.

    Example:
        >>> import seeder
        >>> seeder.default_seeder() is seeder.default_seeder()
        True
        >>> seeder.init(5); seeder.default_seeder().get_master_seed()
        5
    """
    if not _DEFAULT:
        made = Seeder()
        made.is_default = True
        _DEFAULT.append(made)
    return _DEFAULT[0]


def check_seeder(seeder: Any) -> Optional[Seeder]:
    """``seeder`` if it is a :class:`Seeder` or ``None`` (resolved later, at use), else a
    ``TypeError``.

    >>> check_seeder(None) is None
    True
    """
    if seeder is not None and not isinstance(seeder, Seeder):
        raise TypeError(
            f"seeder must be a seeder.Seeder or None (the default seeder), got "
            f"{type(seeder).__name__} {seeder!r}"
        )
    return seeder


def resolve_seeder(seeder: Any) -> Seeder:
    """``seeder``, or the default seeder when it is ``None``; a ``TypeError`` for anything else.

    >>> s = Seeder(); resolve_seeder(s) is s
    True
    """
    return default_seeder() if check_seeder(seeder) is None else seeder


class UsesSeeder:
    """A sampler or loader bound at construction to one :class:`seeder.Seeder` (kept in
    ``self._seeder``).

    >>> class Loader(UsesSeeder):
    ...     def __init__(self, seeder=None): self._seeder = resolve_seeder(seeder)
    >>> s = Seeder(); Loader(s).seeder is s
    True
    """

    _seeder: Seeder

    @property
    def seeder(self) -> Seeder:
        """The :class:`seeder.Seeder` whose master seed, rank and reseeds drive this object."""
        return self._seeder
