"""What a sampler knows of the loader around it, and what a plain torch ``DataLoader`` lacks for an exact resume.

Each :class:`seeder.DistributedSampler` holds one :class:`LoaderWatch`. When an iteration
starts, the watch looks for the ``torch.utils.data.DataLoader`` that drives the sampler on
the call stack (torch passes no loader to a sampler); when the sampler's state is taken or
loaded, it finds that loader (through the garbage collector's referrers, once; then a weak
reference) and warns once per cause of what would make a resume diverge silently:

* the training loop reported no consumed sample (``sampler.advance``) while the loader drew
  indices, and the loader does not save the position itself (torchdata's ``StatefulDataLoader``
  does, recognised by its class);
* ``generator=None``: every ``iter(loader)`` draws its base seed from torch's global RNG;
* workers without per-sample seeding: worker RNG streams depend on which worker ran
  what and on how far it got, not on the position in the epoch.

``seeder.DataLoader`` needs none of this (it is skipped). The call-stack reading relies on
torch's iterator internals, listed in :mod:`seeder.internals`.

Example:
    >>> import torch, seeder
    >>> s = seeder.Seeder(); s.init(0)
    >>> sampler = seeder.DistributedSampler(range(8), seeder=s)
    >>> loader = torch.utils.data.DataLoader(range(8), sampler=sampler)
    >>> [p.split(":")[0] for p in audit_loader(find_loader(sampler), mid_epoch=False)]
    ['no generator']
"""
from __future__ import annotations

import gc
import sys
import warnings
import weakref
from typing import Any, Callable, List, Optional, Set, Tuple

import torch.utils.data

from ..errors import SeederWarning
from ..internals import require
from .workers import SeededDataset, WorkerInitFn

__all__ = ["LoaderWatch", "find_loader", "audit_loader", "unconsumed_message"]


class LoaderWatch:
    """The loader around one sampler: which ``DataLoader`` iterates it, whether that loader saves the position
    itself, and the warnings already given.

    The sampler calls :meth:`iterating` when an iteration draws its first block, and :meth:`check`
    from ``state_dict``/``load_state_dict``.

    >>> import torch, warnings, seeder
    >>> s = seeder.Seeder(); s.init(0); sampler = seeder.DistributedSampler(range(8), seeder=s)
    >>> loader = torch.utils.data.DataLoader(range(8), sampler=sampler, batch_size=2)
    >>> _ = next(iter(loader))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always"); _ = sampler.state_dict()
    >>> msgs = [str(w.message) for w in caught]
    >>> any("sampler.advance" in m for m in msgs), any("no generator" in m for m in msgs)
    (True, True)
    """

    def __init__(self) -> None:
        self._loader: Optional[Callable[[], Any]] = None  # weak reference to the DataLoader, once looked up
        self._under_loader = False  # a DataLoader iterator was seen drawing from the sampler (the loader not found)
        self._warned_causes: Set[str] = set()
        self._warned_epoch: Optional[int] = None
        self._resume: Optional[Tuple[Any, Tuple[int, int]]] = None  # (seeder, (epoch, position)) of a load to check
        #: The loader saves the iterator's position itself (torchdata's ``StatefulDataLoader``).
        self.position_saved = False

    def resuming(self, seeder: Any, epoch: int, position: int, total: int) -> None:
        """Called when the sampler loads ``(epoch, position)`` of ``total`` samples: inside an epoch, its first indices
        will check that nothing drew from the global RNGs since the load (:mod:`seeder.resumecheck`)."""
        self._resume = None
        if 0 < position < total:
            seeder.resume_check.want(self)
            self._resume = (seeder, (epoch, position))

    def iterating(self, sampler: Any, epoch: int, start: int) -> None:
        """Called by ``sampler``'s iteration of ``epoch`` from ``start`` when it draws its first block: the check of a
        resumed epoch, and remember the DataLoader that drives the sampler."""
        if self._resume is not None and self._resume[1] == (epoch, start):
            seeder, self._resume = self._resume[0], None
            seeder.resume_check.warn_if_moved(self, "seeder.DistributedSampler", epoch)
        if self._loader is not None:
            return
        found = _loader_on_stack(sampler, sys._getframe(1))
        if found is True:
            self._under_loader = True  # single-process loading: looked up when the state is taken
        elif found is not None:
            self._loader = weakref.ref(found)

    def loader(self, sampler: Any) -> Optional[torch.utils.data.DataLoader]:
        """The DataLoader that iterates ``sampler``, if one was seen (a garbage-collector scan, once, when only its
        iterator was on the call stack)."""
        if self._loader is None and self._under_loader:
            found = find_loader(sampler)
            self._loader = weakref.ref(found) if found is not None else (lambda: None)
        return self._loader() if self._loader is not None else None

    def check(self, sampler: Any, what: str, *, handed: int, finished: bool, loaded: bool = False) -> None:
        """One :class:`seeder.SeederWarning` per way the loader around ``sampler`` loses exactness.

        ``what``: ``"state_dict"`` or ``"load_state_dict"``; ``handed``: the end of the last block handed out;
        ``finished``: the iteration handed out its last block; ``loaded``: a state was just loaded (the
        warning about unconsumed samples may come again for its epoch).
        """
        loader = self.loader(sampler)
        if not self.position_saved and loader is not None and _saves_position(loader):
            self.position_saved = True
        if loaded:
            self._warned_epoch = None
        epoch, consumed, total = sampler.epoch, sampler.consumed, sampler.num_samples
        if self._warned_epoch != epoch and not self.position_saved and consumed == 0 and handed > 0:
            self._warned_epoch = epoch
            warnings.warn(unconsumed_message(what, epoch, finished), SeederWarning, stacklevel=4)
        mid = 0 < consumed < total or (handed > 0 and consumed < total)
        for problem in audit_loader(loader, mid, self._warned_causes):
            warnings.warn(f"sampler.{what}(): {problem}", SeederWarning, stacklevel=4)


def _saves_position(loader: Any) -> bool:
    """Whether ``loader`` is torchdata's ``StatefulDataLoader`` (which saves its sampler iterator's position).

    Only a loaded torchdata can have made one: torchdata is never imported here.
    """
    module = sys.modules.get("torchdata.stateful_dataloader")
    return module is not None and isinstance(loader, module.StatefulDataLoader)


def _loader_on_stack(sampler: Any, frame: Any, depth: int = 12) -> Any:
    """The ``DataLoader`` that owns ``sampler`` on the call stack above ``frame``, ``True`` if only a DataLoader
    iterator is there (single-process loading), else ``None``. Looks at ``depth`` frames.

    >>> _loader_on_stack(object(), sys._getframe()) is None
    True
    """
    require("torch:_MultiProcessingDataLoaderIter._reset")  # the frame locals and iterator names read below
    under = None
    for _ in range(depth):
        frame = frame.f_back
        if frame is None:
            break
        local = frame.f_locals
        for name in ("loader", "self"):
            obj = local.get(name)
            if isinstance(obj, torch.utils.data.DataLoader) and (
                    obj.sampler is sampler or getattr(obj.batch_sampler, "sampler", None) is sampler):
                return obj
            if obj is not None and type(obj).__name__.endswith("DataLoaderIter"):
                under = True
    return under


def find_loader(sampler: Any) -> Optional[torch.utils.data.DataLoader]:
    """The ``DataLoader`` whose ``sampler`` (or ``batch_sampler.sampler``) is ``sampler``, or ``None``.

    Scans the garbage collector's referrers: call it rarely (:class:`LoaderWatch` caches the answer).
    """
    def owns(obj: Any) -> bool:
        return isinstance(obj, torch.utils.data.DataLoader) and (
            obj.sampler is sampler or getattr(obj.batch_sampler, "sampler", None) is sampler)

    candidates = gc.get_referrers(sampler)
    for ref in candidates:
        if owns(ref):
            return ref
    for ref in candidates:  # the sampler sits in an instance __dict__ (or a BatchSampler's)
        if isinstance(ref, dict):
            for outer in gc.get_referrers(ref):
                if owns(outer):
                    return outer
                if isinstance(outer, torch.utils.data.BatchSampler):
                    for d in gc.get_referrers(outer):
                        for loader in gc.get_referrers(d) if isinstance(d, dict) else [d]:
                            if owns(loader):
                                return loader
    return None


def audit_loader(loader: Optional[torch.utils.data.DataLoader], mid_epoch: bool,
                 seen: Optional[Set[str]] = None) -> List[str]:
    """What ``loader`` lacks for an exact resume (each problem a sentence that names the fix); ``[]`` if nothing.

    With ``seen``, problems whose cause (the text before ``:``) is in it are left out, and the new
    causes are added to it: each cause is reported once.
    """
    if loader is None or getattr(loader, "seeder_kind", None) == "loader":
        return []
    problems = []
    if loader.generator is None:
        problems.append(
            "no generator: the DataLoader has no generator=, so every iter(loader) draws its base seed from torch's "
            "global RNG and a resumed run draws once more than the run it continues; pass "
            "generator=seeder.dataloader_generator() (or use seeder.DataLoader)")
    if loader.num_workers > 0:
        ds = loader.dataset
        per_sample = isinstance(ds, SeededDataset) and ds.per_sample
        per_epoch = isinstance(ds, SeededDataset) or isinstance(loader.worker_init_fn, WorkerInitFn)
        if not per_sample and (mid_epoch or not per_epoch):
            where = "inside an epoch" if mid_epoch else "at epoch boundaries (no seeder worker seeding)"
            problems.append(
                f"worker randomness: the DataLoader's {loader.num_workers} workers draw random numbers that depend on "
                f"which worker ran which batch and how far it got, so a resume {where} does not continue them; wrap the "
                "dataset in seeder.SeededDataset (per-sample seeds) or use seeder.DataLoader")
    if seen is not None:
        problems = [p for p in problems if p.split(":")[0] not in seen]
        seen.update(p.split(":")[0] for p in problems)
    return problems


def unconsumed_message(what: str, epoch: int, finished: bool) -> str:
    """The warning of a sampler whose ``what`` (``state_dict``/``load_state_dict``) sees indices drawn but none consumed.

    ``finished``: the loader drew the whole epoch (it prefetches).

    >>> "advance" in unconsumed_message("state_dict", 0, False)
    True
    """
    if finished:
        return (f"sampler.{what}(): the DataLoader drew every index of epoch {epoch} (it prefetches) but no "
                "sample was reported consumed, so this state resumes at the start of the epoch; call "
                "sampler.advance(len(batch)) after each training step (or use seeder.DataLoader)")
    return (f"sampler.{what}(): epoch {epoch} is being iterated but no sample was reported consumed, so "
            "this state resumes at the start of the epoch; call sampler.advance(len(batch)) after each "
            "training step to resume mid-epoch (or use seeder.DataLoader)")
