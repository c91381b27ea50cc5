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
:class:`DiscardWatch` counts what the training loop does with them that trains: optimizer steps,
backward passes (``torch.autograd.backward``, which ``Tensor.backward`` calls, and
``torch.autograd.grad``: a functional model stepped by hand), and forward passes of modules with
parameters that require grad, with grad enabled. A module without such parameters (an
augmentation, applied before the skip's ``continue`` too) or a forward pass without grad (an
evaluation) does not train. The watch uses torch's global hooks
(``register_module_forward_pre_hook``, ``register_optimizer_step_post_hook``) and wraps the two
autograd functions, for that time only: all are removed as soon as the watch has decided. What
runs while the loader fetches (``num_workers=0``, a transform that is an ``nn.Module``) does not
count.

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
at the first forward pass of any module, backward pass or optimizer step that follows (a
validation, the next epoch). A resume at batch 1 is not watched: one batch discarded looks like a
framework's fetch ahead.

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

import functools
import logging
import sys
import warnings
import weakref
from typing import Any, Callable, Optional

import torch
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

        def forward(module: torch.nn.Module, _: Any) -> None:
            watch = me()
            if watch is not None:
                watch._module_forward(module)

        self._handles = [
            register_module_forward_pre_hook(forward),
            register_optimizer_step_post_hook(count),
            _BackwardHook(count),
        ]

    @property
    def active(self) -> bool:
        """Whether the hooks are still registered (the watch has not decided)."""
        return bool(self._handles)

    def _module_forward(self, module: torch.nn.Module) -> None:
        # While deciding, only a forward pass that trains counts; once the epoch ended with
        # nothing trained, any forward pass (a validation) says the loop has a model.
        if self._pending is not None or _trains(module):
            self._used()

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
            f"loop discarded the first {discarded} batches it handed out (batches "
            f"{first}..{last}, never trained). Drop the loop's skip of the saved batches and "
            f"number them with `enumerate(loader, start=loader.batches_done)` "
            f"(see docs/dataloader.md#do-not-skip-batches-on-resume)",
            SeederWarning,
            stacklevel=stacklevel,
        )

    def close(self) -> None:
        """Remove the hooks (idempotent)."""
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def __del__(self, finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if not finalizing():  # dropped undecided (a loop left with break, a loader gone)
            self.close()


def _trains(module: torch.nn.Module) -> bool:
    """Whether a forward pass of ``module`` trains it: grad enabled, and a parameter of its own
    that requires grad (an augmentation module has none; a model's layers have)."""
    return torch.is_grad_enabled() and any(
        p.requires_grad for p in module.parameters(recurse=False)
    )


#: The backward hooks of the watches deciding now; :func:`torch.autograd.backward` and
#: :func:`torch.autograd.grad` are wrapped while there is one.
_backward_hooks: set[_BackwardHook] = set()
_unwrapped: dict[str, Callable[..., Any]] = {}


class _BackwardHook:
    """Calls ``fn`` at every backward pass (``torch.autograd.backward`` or ``.grad``) until
    :meth:`remove`: what torch's hooks do for forward passes and optimizer steps."""

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn
        if not _backward_hooks:
            _wrap_autograd()
        _backward_hooks.add(self)

    def remove(self) -> None:
        _backward_hooks.discard(self)
        if not _backward_hooks:
            _unwrap_autograd()


def _wrap_autograd() -> None:
    for name in ("backward", "grad"):
        original = getattr(torch.autograd, name)

        @functools.wraps(original)
        def seen(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            for hook in list(_backward_hooks):
                hook.fn()
            return _original(*args, **kwargs)

        _unwrapped[name] = original
        setattr(torch.autograd, name, seen)


def _unwrap_autograd() -> None:
    for name, original in _unwrapped.items():
        if getattr(getattr(torch.autograd, name), "__wrapped__", None) is original:
            setattr(torch.autograd, name, original)  # not if someone wrapped it since
    _unwrapped.clear()
