"""The discard watch: a loader resumed inside an epoch warns when the training loop throws its first
batches away.

A common resume idiom skips the batches the interrupted run had trained::

    for i, batch in enumerate(loader):
        if i < state["epoch_step"]:
            continue
        ...

seeder's loaders already start at the saved batch, so that loop throws away the first
``epoch_step`` batches of what is left of the epoch, and trains none of them. While a loader
resumed at batch ``start >= 2`` of an epoch hands out its first batches, a
:class:`DiscardWatch` counts what the training loop does with them: module forward passes and
optimizer steps, through torch's global hooks (``register_module_forward_pre_hook``,
``register_optimizer_step_post_hook``), registered for that time only and removed as soon as the
watch has decided. A forward pass or step that runs while the loader fetches (``num_workers=0``,
a transform that is an ``nn.Module``) does not count.

The first use of a batch tells the loops apart:

* a loop that trains every batch uses the first one before asking for the second (gradient
  accumulation too: it runs a forward pass on each batch and steps every few);
* a framework that fetches one batch ahead (Lightning's, accelerate's) uses the first one
  after the second is handed;
* the skip idiom hands ``start`` batches with no forward pass and no step in between, and uses
  batch ``start + 1`` first; or discards all that is left, and the epoch ends unused.

The watch warns once (:class:`seeder.SeederWarning`, which names the idiom and
``enumerate(loader, start=loader.batches_done)``) when the first use comes after ``start + 1``
or more batches. When the epoch ends after two or more batches with none used, the loop may hold
no model at all (a test, a look at the data): the watch stays, as long as the loader, and warns
at the first forward pass or optimizer step that follows (a validation, the next epoch). A
resume at batch 1 is not watched: one batch discarded looks like a framework's fetch ahead.

Example:
    >>> import torch, warnings
    >>> watch = DiscardWatch(2, 0, "seeder.DataLoader")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     # batches 2 and 3 of the epoch handed and skipped, the next one trained
    ...     for _ in range(3):
    ...         watch.next_asked(); watch.handed()
    ...     _ = torch.nn.Linear(1, 1)(torch.ones(1)); watch.next_asked()
    >>> "discarded" in str(caught[0].message), watch.active
    (True, False)
"""

from __future__ import annotations

import logging
import warnings
import weakref
from typing import Any, Optional

from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from seeder._errors import SeederWarning

__all__ = ["DiscardWatch", "FIRST_WATCHED"]

logger = logging.getLogger("seeder")

#: The first batch of an epoch whose resume is watched: a resume at batch 1 is not (one batch
#: discarded cannot be told from a framework that fetches one batch ahead).
FIRST_WATCHED = 2


class DiscardWatch:
    """Counts forward passes and optimizer steps while a resumed loader hands its first batches;
    warns on the idiom.

    Args:
        start: the batch of the epoch the loader resumed at (batches handed before the stop).
        epoch: the epoch, for the message.
        what: the loader's class as the user wrote it, for the message.

    The loader's iterator calls :meth:`next_asked` when the training loop asks for a batch (before
    it fetches: what runs from then on is the fetch's), :meth:`handed` once it has the batch,
    and :meth:`ended` when the epoch has no more. Whoever holds the watch keeps the hooks: a watch
    dropped undecided removes them.
    """

    def __init__(self, start: int, epoch: int, what: str):
        self._handles: list[Any] = []
        self.start, self.epoch, self.what = start, epoch, what
        self.batches = 0  # batches handed so far
        self.uses = 0  # forward passes and optimizer steps outside the loader's fetches
        self._mark = 0  # uses when the last batch was handed
        self._fetching = False
        self._pending: Optional[int] = (
            None  # batches discarded up to the epoch's end, confirmed by a later use
        )
        me = weakref.ref(self)  # the hooks do not keep the watch alive

        def count(*_: Any) -> None:
            watch = me()
            if watch is not None:
                watch._used()

        self._handles = [
            register_module_forward_pre_hook(count),
            register_optimizer_step_post_hook(count),
        ]

    @property
    def active(self) -> bool:
        """Whether the hooks are still registered (the watch has not decided)."""
        return bool(self._handles)

    def _used(self) -> None:
        if self._fetching:
            return
        self.uses += 1
        if (
            self._pending is not None
        ):  # the loop trains after all: the epoch's last batches were thrown away
            discarded, self._pending = self._pending, None
            self.close()
            self._warn(discarded, stacklevel=3)

    def next_asked(self) -> None:
        """The training loop asks for the next batch: if it used one since the last was handed,
        decide."""
        if self._handles and self.batches and self.uses > self._mark:
            self._decide(used_after=self.batches)
        self._fetching = bool(self._handles)

    def handed(self) -> None:
        """A batch was handed to the training loop."""
        self._fetching = False
        if not self._handles:
            return
        self.batches += 1
        self._mark = self.uses
        if (
            self.batches > self.start + 1
        ):  # nothing used after start + 1 batches: not the idiom's pattern
            self.close()

    def ended(self) -> bool:
        """The epoch has no more batches; ``True`` when the watch waits for a use to confirm a
        discarded rest (keep the watch, and its hooks, as long as the loader)."""
        self._fetching = False
        if not self._handles:
            return False
        if self.uses > self._mark:
            self._decide(used_after=self.batches)
            return False
        if self.batches < 2:
            self.close()
            return False
        # Every batch left was dropped. A loop without a model does that too: the first forward pass
        # or optimizer step from now on (a validation, the next epoch) says that this one is a
        # training loop.
        self._pending = self.batches
        return True

    def _decide(self, used_after: int) -> None:
        self.close()
        if used_after > self.start:
            self._warn(used_after - 1, stacklevel=5)

    def _warn(self, discarded: int, stacklevel: int) -> None:
        first, last = self.start, self.start + discarded - 1
        warnings.warn(
            f"{self.what} resumed at batch {self.start} of epoch {self.epoch}, and the training "
            f"loop discarded the first {discarded} batches it handed out (no forward pass, no "
            f"optimizer step between them): batches {first}..{last} of the epoch, which the "
            f"interrupted run had not trained. The loader already starts at the saved batch, so a "
            f"loop that skips the saved number of batches (`for i, batch in enumerate(loader): if "
            f"i < saved_step: continue`) skips them a second time. Drop the skip and number the "
            f"batches with `for i, batch in enumerate(loader, start=loader.batches_done)`",
            SeederWarning,
            stacklevel=stacklevel,
        )

    def close(self) -> None:
        """Remove the hooks (idempotent)."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def __del__(self) -> None:  # dropped undecided (a loop left with break, a loader gone)
        self.close()
