"""Names of the user's modules bound to a seeding function before ``seeder.init`` wrapped it.

``from torch import manual_seed`` run before ``init`` keeps torch's own function under that name:
its calls seed as they say and no wrapper of :mod:`seeder._seeding.foreign` sees them. ``init``
warns once about each such name, with the file and line that bound it.

Example:
    >>> warn_bound_names(("/",))  # every module lies under "/": none is the user's, no warning
"""

from __future__ import annotations

import linecache
import sys
import warnings
from typing import Any

from seeder._errors import SeederWarning

__all__ = ["UNWATCHED", "warn_bound_names"]

#: The seeding functions ``init`` wrapped, by id: ``(function, its name in messages)``. A name
#: bound to one of them before is not watched.
UNWATCHED: dict[int, tuple[Any, str]] = {}
#: ``(file, name)`` already warned about.
_warned: set[tuple[str, str]] = set()


def _import_line(where: str, attr: str) -> int:
    """The first line of ``where`` that imports ``attr`` (1 when none is found)."""
    for n, text in enumerate(linecache.getlines(where), 1):
        if "import" in text and attr in text:
            return n
    return 1


def warn_bound_names(installed: tuple[str, ...]) -> None:
    """Warn once per name for each name of the user's modules bound to a function of
    :data:`UNWATCHED` (``from torch import manual_seed``): calls through it are not seen.

    Args:
        installed: where the installed packages and the standard library live: modules there are
            not the user's.
    """
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name != "__main__" and (not isinstance(path, str) or path.startswith(installed)):
            continue
        where = path if isinstance(path, str) else name
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for attr, value in list(names.items()):
            found = UNWATCHED.get(id(value))
            if found is None or found[0] is not value or (where, attr) in _warned:
                continue
            _warned.add((where, attr))  # a module under two names (__mp_main__) once
            primitive, line = found[1], _import_line(where, attr)
            warnings.warn_explicit(
                f"{where}:{line} binds {attr!r} to {primitive} before seeder.init: calls "
                f"through that name reseed with no word, so later draws follow their seed, not "
                f"the master seed. Call {primitive}(...) through its module, or drop the call "
                f"(seeder.reseed seeds random, NumPy and torch)",
                SeederWarning,
                where,
                line,
            )
