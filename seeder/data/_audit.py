"""What a sampler is told of the loader around it, and what a plain torch ``DataLoader`` lacks for
an exact resume.

torch hands a sampler no loader, so the loader (or the user) tells it. Each
:class:`seeder.DistributedSampler` holds one :class:`LoaderWatch`, told by:

* ``seeder.DataLoader``, which owns its sampler: it keeps the position and seeds the workers itself;
* :func:`watch_loader`, for a torch ``DataLoader`` (or torchdata's ``StatefulDataLoader``) a user
  built;
* the sampler's own iterator, when a loader takes or gives its state (torchdata does): that loader
  saves the position.

When the sampler's state is taken inside an epoch, or the first indices of an epoch resumed
inside are drawn, the watch warns once per cause of what would make the resume diverge silently:

* the training loop reported no consumed sample (``sampler.advance``) while the loader drew
  indices, and no loader saves the position;
* ``generator=None``: every ``iter(loader)`` draws its base seed from torch's global RNG;
* workers without per-sample seeding: worker RNG streams depend on which worker ran
  what and on how far it got, not on the position in the epoch;
* a loader it was not told of: seeder cannot check it, and says how to let it;
* a loader that gives the sampler iterator a position inside an epoch (torchdata's
  ``StatefulDataLoader`` resuming) over a dataset without per-sample seeds: its workers' random
  numbers are not continued, unless it was shown and has none.

Example:
    >>> import torch, seeder
    >>> s = seeder.Seeder(); s.init(0)
    >>> sampler = seeder.DistributedSampler(range(8), seeder=s)
    >>> loader = watch_loader(torch.utils.data.DataLoader(range(8), sampler=sampler))
    >>> [p.split(":")[0] for p in audit_loader(loader, mid_epoch=True)]
    ['no generator']
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

import torch.utils.data

if TYPE_CHECKING:
    from seeder._seeding.core import Seeder

from seeder._errors import SeederWarning
from seeder.data._workers import SeededDataset, WorkerInitFn

__all__ = ["LoaderWatch", "watch_loader", "audit_loader", "unconsumed_message"]

L = TypeVar("L")

#: The cause (text before ``:``) of the warning about a loader the sampler was not told of.
UNSEEN = "loader not shown"
#: The cause of the warning about a loader (not shown) resuming the sampler's iterator inside an
#: epoch over a dataset without per-sample seeds.
UNSEEN_RESUMED = "random numbers not continued"


class LoaderWatch:
    """The loader around one sampler, as told: which loader iterates it, whether that loader saves
    the position itself, and the warnings already given.

    The sampler calls :meth:`iterating` when an iteration draws its first block, and :meth:`check`
    from ``state_dict``.

    >>> import torch, warnings, seeder
    >>> s = seeder.Seeder(); s.init(0); sampler = seeder.DistributedSampler(range(8), seeder=s)
    >>> plain = torch.utils.data.DataLoader(range(8), sampler=sampler, batch_size=2)
    >>> loader = seeder.data.watch_loader(plain)
    >>> _ = next(iter(loader))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always"); _ = sampler.state_dict()
    >>> msgs = [str(w.message) for w in caught]
    >>> any("sampler.advance" in m for m in msgs), any("no generator" in m for m in msgs)
    (True, True)
    """

    def __init__(self) -> None:
        self._loader: Callable[[], Any] = lambda: None  # weak reference to the loader told of
        self._shown = (
            False  # a loader was told of (or the sampler's iterator saw a loader take its state)
        )
        self._held = False  # self._loader refers to the loader told of (dropped since, maybe)
        self._by_state = False  # a loader took or gave the sampler iterator's state
        self._warned_causes: set[str] = set()
        self._warned_epoch: Optional[int] = None
        self._resume: Optional[tuple[Any, tuple[int, int]]] = (
            None  # (seeder, (epoch, position)) of a load to check
        )
        #: The loader saves the iterator's position itself (torchdata's ``StatefulDataLoader``).
        self.position_saved = False

    def show(self, loader: Any) -> None:
        """Record that ``loader`` iterates the sampler (:func:`watch_loader`,
        ``seeder.DataLoader``)."""
        if self._loader() is not loader:  # another loader: its problems are its own, warned afresh
            self._warned_causes = set()
        self._loader, self._shown, self._held = weakref.ref(loader), True, True
        if _saves_position(loader):
            self.position_saved = True

    def note_position_saved(self) -> None:
        """Record that a loader took or gave the sampler iterator's state: it saves the position
        itself."""
        self.position_saved = self._shown = self._by_state = True

    def iterator_resumed(self, sampler: Any, yielded: int) -> None:
        """Called when a loader gives the sampler's iterator its position (torchdata's
        ``StatefulDataLoader`` resuming): inside an epoch, over a dataset without per-sample
        seeds, warn once per cause of what makes the items after the position differ from the run
        that saved it.

        A loader shown (:func:`watch_loader`) is checked (:func:`audit_loader`); one not shown may
        have workers, whose random numbers no loader state continues.
        """
        self.note_position_saved()
        ds = sampler.dataset
        if not 0 < yielded < sampler.num_samples or (
            isinstance(ds, SeededDataset) and ds.per_sample
        ):
            return
        self._forget_dropped()
        loader = self._loader() if self._held else None
        if loader is not None:
            problems = audit_loader(loader, True, self._warned_causes)
        elif UNSEEN_RESUMED in self._warned_causes:
            problems = []
        else:
            self._warned_causes.add(UNSEEN_RESUMED)
            problems = [
                f"{UNSEEN_RESUMED}: the loader continues the order, but the random numbers its "
                f"items draw (augmentations) come from where its workers' RNGs start, not from "
                f"where the saved run's had got to, so the items after the resume differ from "
                f"those of the run that saved the state; wrap the dataset in "
                f"seeder.data.SeededDataset (per-sample seeds: exact with any number of "
                f"workers), or use seeder.DataLoader. A loader without workers can be shown "
                f"with seeder.data.watch_loader(loader) to check it"
            ]
        for problem in problems:
            warnings.warn(
                f"the seeder.DistributedSampler's iterator resumed at sample {yielded} of epoch "
                f"{sampler.epoch}: {problem}",
                SeederWarning,
                stacklevel=4,
            )

    def _forget_dropped(self) -> None:
        """A loader told of and dropped since iterates the sampler no more: the one that does now
        was not shown."""
        if self._held and self._loader() is None:
            self._held, self._shown, self.position_saved = False, self._by_state, self._by_state
            self._warned_causes = set()

    def resuming(self, seeder: Seeder, epoch: int, position: int, total: int) -> None:
        """Called when the sampler loads ``(epoch, position)`` of ``total`` samples: inside an
        epoch, its first indices check that nothing drew from the global RNGs since the load
        (:mod:`seeder._state.resumecheck`) and what the loader lacks for an exact resume."""
        self._resume = None
        self._warned_epoch = None
        if 0 < position < total:
            seeder.resume_check.want(self)
            self._resume = (seeder, (epoch, position))

    def iterating(self, epoch: int, start: int) -> None:
        """Called by the sampler's iteration of ``epoch`` from ``start`` when it draws its first
        block: the checks of an epoch resumed inside."""
        if self._resume is None or self._resume[1] != (epoch, start):
            return
        seeder, self._resume = self._resume[0], None
        seeder.resume_check.warn_if_moved(self, "seeder.DistributedSampler", epoch)
        for problem in self._problems(mid_epoch=True):
            warnings.warn(
                f"seeder.DistributedSampler resumed inside epoch {epoch}: {problem}",
                SeederWarning,
                stacklevel=5,
            )

    def check(self, sampler: Any, *, handed: int, finished: bool) -> None:
        """One :class:`seeder.SeederWarning` per way the loader around ``sampler`` loses exactness,
        when its state is taken.

        ``handed``: the end of the last block handed out; ``finished``: the iteration handed out its
        last block.
        """
        self._forget_dropped()
        epoch, consumed, total = sampler.epoch, sampler.consumed, sampler.num_samples
        unconsumed = not self.position_saved and consumed == 0 and handed > 0
        if unconsumed and self._warned_epoch != epoch:
            self._warned_epoch = epoch
            warnings.warn(unconsumed_message(epoch, finished), SeederWarning, stacklevel=4)
        mid = 0 < consumed < total or (handed > 0 and consumed < total)
        for problem in self._problems(mid, ask_to_be_shown=not unconsumed):
            warnings.warn(f"sampler.state_dict(): {problem}", SeederWarning, stacklevel=4)

    def _problems(self, mid_epoch: bool, ask_to_be_shown: bool = True) -> list[str]:
        self._forget_dropped()
        if not self._shown:
            if not (mid_epoch and ask_to_be_shown) or UNSEEN in self._warned_causes:
                return []
            self._warned_causes.add(UNSEEN)
            return [
                f"{UNSEEN}: seeder was not told which loader iterates this sampler, so it cannot "
                f"check what would make a resume inside an epoch diverge (a DataLoader without "
                f"generator=, workers whose random numbers depend on which worker ran what); pass "
                f"the loader to seeder.data.watch_loader(loader) once after building it, or use "
                f"seeder.DataLoader"
            ]
        return audit_loader(self._loader(), mid_epoch, self._warned_causes)


def watch_loader(loader: L) -> L:
    """Tell the :class:`seeder.DistributedSampler` inside ``loader`` which loader iterates it.

    torch gives a sampler no reference to its loader. Shown the loader, the sampler's
    ``state_dict()`` inside an epoch, and the first indices of an epoch resumed inside, warn once
    per thing in the loader that makes the resume diverge: no ``generator=``, workers without
    per-sample seeds (:class:`seeder.data.SeededDataset`). A loader that saves the position itself
    (torchdata's ``StatefulDataLoader``) needs no ``sampler.advance``. Only a torch ``DataLoader``
    is checked; a ``seeder.DataLoader`` needs no call.

    Args:
        loader: any object with a seeder sampler as ``sampler`` or ``batch_sampler.sampler``, or
            a ``seeder.DataLoader``.

    Returns:
        ``loader`` itself.

    Raises:
        TypeError: ``loader`` holds no :class:`seeder.DistributedSampler`.

    Example:
        >>> import torch, seeder
        >>> s = seeder.Seeder(); s.init(0)
        >>> sampler = seeder.DistributedSampler(range(8), seeder=s)
        >>> loader = seeder.data.watch_loader(torch.utils.data.DataLoader(
        ...     range(8), sampler=sampler, batch_size=2,
        ...     generator=seeder.data.dataloader_generator(seeder=s)))
        >>> loader.sampler is sampler
        True
    """
    if (
        getattr(loader, "seeder_kind", None) == "loader"
    ):  # seeder.DataLoader, any mode: it shows itself
        return loader
    watch = getattr(getattr(loader, "sampler", None), "loader_watch", None)
    if not isinstance(watch, LoaderWatch):
        inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
        watch = getattr(inner, "loader_watch", None)
    if not isinstance(watch, LoaderWatch):
        raise TypeError(
            f"watch_loader: {type(loader).__name__} holds no seeder.DistributedSampler (as "
            f"sampler= or inside its batch_sampler); build it with "
            f"sampler=seeder.DistributedSampler(dataset), or use seeder.DataLoader"
        )
    watch.show(loader)
    return loader


def _saves_position(loader: Any) -> bool:
    """Whether ``loader`` is torchdata's ``StatefulDataLoader`` (which saves its sampler iterator's
    position).

    Only a loaded torchdata can have made one: torchdata is never imported here.
    """
    module = sys.modules.get("torchdata.stateful_dataloader")
    return module is not None and isinstance(loader, module.StatefulDataLoader)


def audit_loader(loader: Any, mid_epoch: bool, seen: Optional[set[str]] = None) -> list[str]:
    """What ``loader`` lacks for an exact resume (each problem a sentence that names the fix);
    ``[]`` if nothing.

    Only a torch ``DataLoader`` other than ``seeder.DataLoader`` is checked. With ``seen``,
    problems whose cause (the text before ``:``) is in it are left out, and the new causes
    are added to it: each cause is reported once.
    """
    if (
        not isinstance(loader, torch.utils.data.DataLoader)
        or getattr(loader, "seeder_kind", None) == "loader"
    ):
        return []
    problems = []
    if (
        loader.generator is None and mid_epoch
    ):  # at an epoch's start, reseed has just set the RNG it draws from
        problems.append(
            "no generator: the DataLoader has no generator=, so every iter(loader) draws its base "
            "seed from torch's global RNG and a resumed run draws once more than the run it "
            "continues; pass generator=seeder.data.dataloader_generator() (or use "
            "seeder.DataLoader)"
        )
    if loader.num_workers > 0:
        ds = loader.dataset
        per_sample = isinstance(ds, SeededDataset) and ds.per_sample
        per_epoch = isinstance(ds, SeededDataset) or isinstance(loader.worker_init_fn, WorkerInitFn)
        if not per_sample and (mid_epoch or not per_epoch):
            where = (
                "inside an epoch" if mid_epoch else "at epoch boundaries (no seeder worker seeding)"
            )
            problems.append(
                f"worker randomness: the DataLoader's {loader.num_workers} workers draw random "
                f"numbers that depend on which worker ran which batch and how far it got, so a "
                f"resume {where} does not continue them; wrap the dataset in "
                f"seeder.data.SeededDataset (per-sample seeds) or use seeder.DataLoader"
            )
    if seen is not None:
        problems = [p for p in problems if p.split(":")[0] not in seen]
        seen.update(p.split(":")[0] for p in problems)
    return problems


def unconsumed_message(epoch: int, finished: bool) -> str:
    """The warning of a sampler whose ``state_dict()`` sees indices of ``epoch`` drawn but none
    consumed.

    ``finished``: the loader drew the whole epoch (it prefetches).

    >>> "advance" in unconsumed_message(0, False)
    True
    """
    fix = (
        "call sampler.advance(len(batch)) after each training step (a loader that saves the "
        "position itself, torchdata's StatefulDataLoader, needs seeder.data.watch_loader(loader) "
        "instead), or use seeder.DataLoader"
    )
    if finished:
        return (
            f"sampler.state_dict(): the DataLoader drew every index of epoch {epoch} (it "
            f"prefetches) but no sample was reported consumed, so this state resumes at the start "
            f"of the epoch; {fix}"
        )
    return (
        f"sampler.state_dict(): epoch {epoch} is being iterated but no sample was reported "
        f"consumed, so this state resumes at the start of the epoch; {fix}"
    )
