"""Where a map-style loader stands, and the iterator that moves it.

:class:`Cursor` is a :class:`seeder.DataLoader`'s position: the batches of the epoch handed to
the training loop, a loaded resume point, and which iterator is the newest (only it moves the
position). :class:`LoaderIter` is what ``iter(loader)`` returns: torch's iterator, counted in the
main process as batches are handed out, past the batches :meth:`seeder.DataLoader.skip` leaves
out. A shuffled loader iterated again over an epoch its last pass handed out whole, with no reseed
since, warns once (:func:`reseeded` forgets the pass).

Example:
    >>> cursor = Cursor(0)
    >>> epoch, start, token = cursor.start(0); moved = cursor.handed(token, 0, 3)
    >>> moved, cursor.batches_done(0)
    (True, 3)
    >>> cursor.loaded(0, 1); cursor.batches_done(0), cursor.live_token is None
    (1, True)
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Optional, Protocol

from seeder import _hooks as hooks
from seeder._errors import SeederWarning
from seeder._seeding.rngbase import next_keeping
from seeder.data._discardwatch import FIRST_WATCHED, DiscardWatch
from seeder.data._provenance import Ranges
from seeder.data._workers import fetch_adapters

__all__ = ["Cursor", "LoaderIter", "reseeded"]


class IteratedLoader(Protocol):
    """What a map-style loader's iterator reads of its loader (:class:`seeder.DataLoader`)."""

    @property
    def sampler(self) -> Any: ...

    @property
    def seeder(self) -> Any: ...

    @property
    def cursor(self) -> Cursor: ...

    @property
    def num_workers(self) -> int: ...

    @property
    def skip_version(self) -> int: ...

    def pending_skips(self, epoch: int) -> Ranges: ...

    def samples_before(self, batch: int) -> int: ...


#: Loaders whose last pass handed out every batch of an epoch, with no reseed of their task since:
#: ``(that epoch, load_state_dict calls before it)``. A new pass of that epoch repeats its order.
_FULL_PASSES: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()
#: Loaders warned of a repeated pass (once each).
_REPEAT_WARNED: weakref.WeakSet[Any] = weakref.WeakSet()


def reseeded(loader: IteratedLoader, task_id: int) -> None:
    """A reseed of ``task_id`` reached ``loader``: its next pass is the one asked for.

    >>> import torch, seeder; s = seeder.Seeder(); s.init(0)
    >>> reseeded(seeder.DataLoader(torch.arange(4), seeder=s), 1)
    """
    if task_id == loader.sampler.task:
        _FULL_PASSES.pop(loader, None)


def _warn_repeated(loader: IteratedLoader, epoch: int) -> None:
    """Warn once per shuffled loader that a pass starts over the epoch its last pass handed out
    whole, with no reseed since: it repeats that pass's order and random numbers."""
    if not loader.sampler.shuffle or loader in _REPEAT_WARNED:
        return
    _REPEAT_WARNED.add(loader)
    warnings.warn(
        f"seeder.{type(loader).__name__} iterated again in epoch {epoch}, with no "
        f"seeder.reseed(1, epoch) (or loader.set_epoch(epoch)) since its last pass: this "
        f"pass repeats that pass's order and the random numbers of each batch (a torch DataLoader "
        f"would reshuffle). Call seeder.reseed(1, epoch) at the start of each epoch",
        SeederWarning,
        stacklevel=4,
    )


class Cursor:
    """A map-style loader's position: batches handed out, a loaded resume point, the newest
    iterator.

    Args:
        epoch: the epoch the loader starts in.

    >>> cursor = Cursor(2); cursor.batches_done(2), cursor.batches_done(3)
    (0, 0)
    """

    def __init__(self, epoch: int) -> None:
        #: ``(epoch, batch)`` a loaded state continues from, until the next iterator starts there.
        self.resume: Optional[tuple[int, int]] = None
        #: ``(epoch, batches handed out)``.
        self.done: tuple[int, int] = (epoch, 0)
        #: Identifies the newest iterator; only it moves the position (``None`` before the first).
        self.live_token: Optional[object] = None
        #: ``load_state_dict`` calls: an iterator started before the last one stops.
        self.loads = 0
        #: A resumed epoch's discard watch that outlives its iterator (:mod:`._discardwatch`).
        self.waiting: Optional[DiscardWatch] = None

    def batches_done(self, epoch: int) -> int:
        """Batches of ``epoch`` handed out; after a resume, those before the stop count too."""
        for mark in (self.resume, self.done):
            if mark is not None and mark[0] == epoch:
                return mark[1]
        return 0

    def start(self, epoch: int) -> tuple[int, int, object]:
        """A new iterator of ``epoch`` starts: ``(epoch, first batch, its token)``; a loaded
        resume point is used once."""
        start = self.resume[1] if self.resume is not None and self.resume[0] == epoch else 0
        self.resume = None
        self.live_token = token = object()
        self.done = (epoch, start)
        return epoch, start, token

    def resuming(self, epoch: int) -> bool:
        """Whether the next iterator of ``epoch`` continues a loaded position."""
        return self.resume is not None and self.resume[0] == epoch

    def handed(self, token: object, epoch: int, batches: int) -> bool:
        """The iterator ``token`` handed out the first ``batches`` of ``epoch``; ``False`` (nothing
        moves) unless it is the newest."""
        if token is not self.live_token:
            return False
        self.done = (epoch, batches)
        return True

    def loaded(self, epoch: int, batch: int) -> None:
        """A state was loaded: the next iterator starts at ``batch`` of ``epoch``; older ones
        stop."""
        self.resume = self.done = (epoch, batch)
        self.live_token = None
        self.loads += 1


class LoaderIter:
    """What ``iter(seeder.DataLoader)`` returns: torch's iterator, counted in the main process as
    batches are handed out.

    Args:
        loader: the loader (its :class:`Cursor`, skips and seeder).
        inner: torch's iterator over the loader's batch keys.
        epoch, start, token: where this iterator starts, and its token (:meth:`Cursor.start`).
    """

    def __init__(self, loader: IteratedLoader, inner: Any, epoch: int, start: int, token: object):
        self._loader, self._inner = loader, inner
        self._epoch, self._next, self._token = epoch, start, token
        self._start, self._loads = start, loader.cursor.loads
        self._total = len(inner)
        if start == 0 and _FULL_PASSES.get(loader) == (epoch, self._loads):
            _warn_repeated(loader, epoch)
        # the epoch's skipped batches (the batch sampler leaves them out), and those skipped later
        self._skips = loader.pending_skips(epoch)
        self._late: Optional[Ranges] = None
        self._skip_version = loader.skip_version
        # With 0 workers the main process fetches: the streams a fetch seeds are saved and put back.
        self._restore = fetch_adapters() if loader.num_workers == 0 else []
        self._trace = hooks.listening(hooks.BATCH)
        # Resumed inside the epoch: a loop that skips the batches it had trained would drop these
        # (the discard watch).
        self._watch = (
            DiscardWatch(start, epoch, f"seeder.{type(loader).__name__}")
            if FIRST_WATCHED <= start < len(inner)
            else None
        )

    def __iter__(self) -> LoaderIter:
        return self

    def __len__(self) -> int:
        """The batches this iterator yields: what is left of the epoch when it started from a loaded
        position."""
        end = len(self._inner)
        return end - self._start - self._skips.count(self._start, end)

    def _batch_index(self) -> int:
        """The index of the batch just fetched; -1 when it was skipped after this iterator
        started."""
        b = self._next
        if self._skips:
            b = self._skips.next_outside(b)
        self._next = b + 1
        loader = self._loader
        if loader.skip_version != self._skip_version:
            self._skip_version = loader.skip_version
            self._late = loader.pending_skips(self._epoch)
        return -1 if self._late is not None and b in self._late else b

    def _fetch(self) -> Any:
        """The next batch not skipped after this iterator started, and its index."""
        # the main process fetches: the training loop's streams stay as they were
        batch = next_keeping(self._restore, self._inner)
        b = self._batch_index()
        while b < 0:  # fetched before loader.skip() named it: never handed out
            batch = next_keeping(self._restore, self._inner)
            b = self._batch_index()
        return batch, b

    def _watched(self) -> Optional[DiscardWatch]:
        """The discard watch, told that the loop asks for a batch; ``None`` once it decided."""
        watch = self._watch
        if watch is not None:
            watch.next_asked()
            if not watch.active:
                self._watch = watch = None
        return watch

    def __next__(self) -> Any:
        loader, cursor = self._loader, self._loader.cursor
        # Refused before fetching: a fetch seeds the registered generators.
        if cursor.live_token is not self._token and cursor.loads != self._loads:
            raise RuntimeError(
                "this iterator of seeder.DataLoader was started before loader.load_state_dict(): "
                "it stops here instead of yielding batches that the loaded state does not "
                "continue. Call iter(loader) again (a new for loop) to continue from the loaded "
                "position"
            )
        watch = self._watched()
        try:
            batch, b = self._fetch()
        except StopIteration:
            if watch is not None and watch.ended():
                cursor.waiting = watch  # it waits for a use that says the loop trains
            raise
        if watch is not None:
            watch.handed()
        # batches of the epoch handed to the loop
        if cursor.handed(self._token, self._epoch, b + 1):
            if self._skips.next_outside(b + 1) >= self._total:
                _FULL_PASSES[loader] = (self._epoch, self._loads)
        if self._trace:
            position = loader.samples_before(b)
            hooks.batch(loader.seeder, "loader", epoch=self._epoch, step=b, position=position)
        return batch
