"""Find what a plain torch ``DataLoader`` around a seeder sampler is missing for an exact resume.

:class:`seeder.DistributedSampler` calls :func:`audit_loader` when its state is taken or
loaded. It finds the ``torch.utils.data.DataLoader`` that holds the sampler (through the
garbage collector's referrers, once; then a weak reference) and names what would make
a resume diverge silently:

* ``generator=None``: every ``iter(loader)`` draws its base seed from torch's global RNG;
* workers without per-sample seeding: worker RNG streams depend on which worker ran
  what and on how far it got, not on the position in the epoch.

``seeder.DataLoader`` needs neither (it is skipped).

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
from typing import Any, List, Optional, Set

import torch.utils.data

from ..internals import require

__all__ = ["find_loader", "audit_loader", "loader_on_stack", "unconsumed_message"]


def loader_on_stack(sampler: Any, depth: int = 12) -> Any:
    """Called by a sampler's iteration: the ``DataLoader`` on the call stack that owns it, ``True`` if only a
    DataLoader iterator is there (single-process loading), else ``None``. Looks at ``depth`` frames.

    >>> loader_on_stack(object()) is None
    True
    """
    require("torch:_MultiProcessingDataLoaderIter._reset")  # the frame locals and iterator names read below
    frame = sys._getframe(1)
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

    Scans the garbage collector's referrers: call it rarely (the sampler caches the answer).
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
    from .workers import SeededDataset, WorkerInitFn  # the package imports this module: resolve at call time

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
