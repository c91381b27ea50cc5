"""RNG objects a dataset holds that seeder does not seed: found once per process, watched around
each batch, warned about once.

seeder's loaders seed the global RNGs and the registered generators before each batch (or
sample), so an item's numbers come from its own seeds whatever the workers and across a resume.
A dataset that draws from an RNG object of its own (``self.gen = torch.Generator()``, a NumPy
``Generator`` or ``RandomState``, a ``random.Random``) that is not registered gets other
numbers: each worker draws from its own copy, in the order it fetches, and a resumed run starts
that RNG where it stood at construction. :class:`HeldRNGs` finds such objects among the
dataset's attributes (and their attributes, lists and dicts, a few levels down) the first time
the process fetches, compares their states before and after each batch, and warns once per RNG
(:class:`seeder.SeederWarning`, naming the attribute and ``seeder.register_generator``) when a
batch drew from one. In a worker the warning goes to the worker's stderr, as every warning
there. A dataset holding none costs one check per batch.

Example:
    >>> import torch, warnings
    >>> class Noisy(torch.utils.data.Dataset):
    ...     def __init__(self):
    ...         self.gen = torch.Generator().manual_seed(0)
    ...     def __getitem__(self, i):
    ...         return torch.rand(1, generator=self.gen)
    >>> ds, held = Noisy(), HeldRNGs("seeder.DataLoader")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = held.fetch(ds, list, lambda: [ds[0], ds[1]])
    >>> "dataset.gen" in str(caught[0].message)
    True
"""

from __future__ import annotations

import pickle
import random
import types
import warnings
from collections.abc import Iterable
from typing import Any, Callable, Optional

import numpy as np
import torch

from seeder._errors import SeederWarning

__all__ = ["HeldRNGs", "held_rngs"]

#: How deep below the dataset, and how many objects in all, the search looks.
_DEPTH, _VISITS, _ITEMS = 3, 512, 32

Look = Callable[[], Any]


def _look(obj: Any) -> Optional[Look]:
    """A function returning ``obj``'s state as a comparable value, if ``obj`` is an RNG object."""
    if isinstance(obj, torch.Generator):
        return lambda: obj.get_state().numpy().tobytes()
    if isinstance(obj, np.random.Generator):
        return lambda: pickle.dumps(obj.bit_generator.state)
    if isinstance(obj, np.random.RandomState):
        return lambda: pickle.dumps(obj.get_state(legacy=False))
    if isinstance(obj, random.Random) and not isinstance(obj, random.SystemRandom):
        return obj.getstate
    return None


def held_rngs(dataset: Any, registered: Iterable[Any] = ()) -> list[tuple[str, Look]]:
    """The RNG objects ``dataset`` holds, other than ``registered``: ``(path, look)`` each, the
    path as the user would write it (``dataset.transform.rng``).

    Args:
        dataset: the user's dataset.
        registered: the generators registered with the seeder (or their bound ``manual_seed``).

    Returns:
        One ``(path, look)`` per RNG object found, ``look()`` its state as a comparable value.

    >>> import random
    >>> class Data:
    ...     def __init__(self):
    ...         self.rng, self.items = random.Random(0), [random.Random(1)]
    >>> [path for path, _ in held_rngs(Data())]
    ['dataset.rng', 'dataset.items[0]']
    """
    skip = {id(getattr(g, "__self__", g)) for g in registered}
    # the global RNGs, which the loader seeds
    skip |= {id(getattr(f, "__self__", None)) for f in (random.random, np.random.random)}
    skip.add(id(torch.default_generator))
    found: list[tuple[str, Look]] = []
    seen: set[int] = set()
    queue: list[tuple[Any, str, int]] = [(dataset, "dataset", _DEPTH)]
    while queue and len(seen) < _VISITS:
        obj, path, depth = queue.pop(0)
        if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            continue
        seen.add(id(obj))
        look = _look(obj)
        if look is not None:
            if id(obj) not in skip:
                found.append((path, look))
            continue
        if depth == 0 or isinstance(obj, (torch.Tensor, np.ndarray, type, types.ModuleType)):
            continue
        if isinstance(obj, (list, tuple)):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(obj[:_ITEMS])]
        elif isinstance(obj, dict):
            items = list(obj.items())[:_ITEMS]
            children = [(v, f"{path}[{k!r}]") for k, v in items]
        else:
            attrs = getattr(obj, "__dict__", None)
            if not isinstance(attrs, dict):
                continue
            children = [(v, f"{path}.{k}") for k, v in list(attrs.items())[:_ITEMS]]
        queue.extend((v, p, depth - 1) for v, p in children)
    return found


class HeldRNGs:
    """Watches, around each batch, the RNG objects a dataset holds that seeder does not seed.

    Args:
        what: the loader, for the warning.
    """

    def __init__(self, what: str):
        self.what = what
        self._watched: Optional[list[tuple[str, Look]]] = None  # found at the first fetch

    def __getstate__(self) -> dict[str, Any]:  # a spawned worker looks for its own
        return {"what": self.what, "_watched": None}

    def fetch(
        self, dataset: Any, registered: Callable[[], Iterable[Any]], get: Callable[[], Any]
    ) -> Any:
        """``get()``, warning once per RNG of ``dataset`` (not one of ``registered()``, the
        registered generators) that it drew from."""
        watched = self._watched
        if watched is None:
            watched = self._watched = held_rngs(dataset, registered())
        if not watched:
            return get()
        before = [look() for _, look in watched]
        items = get()
        drew = [(p, look) for (p, look), then in zip(watched, before) if look() != then]
        if drew:
            self._watched = [w for w in watched if w not in drew]
            self._warn([p for p, _ in drew])
        return items

    def _warn(self, paths: list[str]) -> None:
        names = ", ".join(paths)
        warnings.warn(
            f"{self.what}: a fetch drew from {names}: RNG object(s) the dataset holds that seeder "
            f"does not seed, so its items depend on the workers and world size and do not resume. "
            f"Register it before the loader starts (seeder.register_generator({paths[0]})), or "
            f"draw from the global RNGs (see docs/dataloader.md#the-datasets-own-rng-objects)",
            SeederWarning,
            stacklevel=2,
        )
