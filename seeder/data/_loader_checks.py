"""Validation of :class:`seeder.DataLoader`'s arguments: what it cannot resume is refused before
anything changes.

Each check raises ``TypeError`` / ``ValueError`` naming the argument, what it got and what
to pass. Stricter than torch where torch's leniency hides a mistake: ``shuffle="no"`` is
truthy (it would shuffle), ``num_workers=1.5`` starts one worker, ``in_order=False``
with workers hands batches out of order (a count of batches is then no position).

Example:
    >>> check_loader_args(True, 0, False, False, 0, None, None, None, {})
    True
"""

from __future__ import annotations

import numbers
from typing import Any, Optional

import torch

from seeder._checks import check_bool, check_int, is_bool
from seeder._seeding.derive import MAX_KEY

__all__ = ["check_loader_args", "check_batch_count", "refuse_elastic"]


def refuse_elastic(kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming :class:`seeder.ElasticDataLoader` if ``kwargs`` hold ``elastic=``.

    Args:
        kwargs: the keyword arguments given to ``seeder.DataLoader``.

    Raises:
        TypeError: ``elastic=`` was given (the elastic loader is its own class).

    >>> refuse_elastic({"elastic": True})
    Traceback (most recent call last):
    ...
    TypeError: seeder.DataLoader takes no elastic= argument: build seeder.ElasticDataLoader(dataset, batch_size=..., shuffle=...) for one global order whatever the world size (docs/elastic.md)
    """
    if "elastic" not in kwargs:
        return
    if kwargs["elastic"] is True:
        raise TypeError(
            "seeder.DataLoader takes no elastic= argument: build seeder.ElasticDataLoader(dataset, "
            "batch_size=..., shuffle=...) for one global order whatever the world size "
            "(docs/elastic.md)"
        )
    raise TypeError(
        f"seeder.DataLoader takes no elastic= argument, got elastic={kwargs['elastic']!r}: drop it "
        "(seeder.ElasticDataLoader is the elastic loader)"
    )


def check_loader_args(
    shuffle: Any,
    num_workers: Any,
    drop_last: Any,
    pin_memory: Any,
    timeout: Any,
    worker_init_fn: Any,
    collate_fn: Any,
    generator: Any,
    kwargs: dict[str, Any],
) -> Optional[bool]:
    """``shuffle`` as ``None``/``bool`` if every argument is one seeder.DataLoader can resume, else
    an error naming it.

    ``kwargs`` are the keyword arguments passed on to torch (``in_order``,
    ``prefetch_factor``, ``persistent_workers``, ...).

    >>> check_loader_args("no", 0, False, False, 0, None, None, None, {})
    Traceback (most recent call last):
    ...
    TypeError: shuffle must be True or False, got str 'no'
    >>> check_loader_args(None, 2, False, False, 0, None, None, None, {"in_order": False})
    Traceback (most recent call last):
    ...
    ValueError: seeder.DataLoader cannot resume in_order=False with num_workers > 0: batches reach the training loop in whichever order the workers finish, so the batches handed out are not the first k of the epoch and a resume would repeat some and skip others. Drop in_order=False, or use torch.utils.data.DataLoader (no exact resume)
    """
    shuffle = None if shuffle is None else check_bool(shuffle, "shuffle")
    num_workers = check_int(num_workers, "num_workers", low=0)
    check_bool(drop_last, "drop_last")
    check_bool(pin_memory, "pin_memory")
    if is_bool(timeout) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
        raise ValueError(
            f"timeout must be a number of seconds >= 0 (0: wait forever), got {timeout!r}"
        )
    for name, fn in (("worker_init_fn", worker_init_fn), ("collate_fn", collate_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be None or a callable, got {type(fn).__name__} {fn!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be None (seeder gives the loader its own) or a torch.Generator, "
            f"got {type(generator).__name__} {generator!r}"
        )
    if "persistent_workers" in kwargs:
        check_bool(kwargs["persistent_workers"], "persistent_workers")
    if kwargs.get("prefetch_factor") is not None:
        check_int(kwargs["prefetch_factor"], "prefetch_factor", low=1)
    if "in_order" in kwargs and not check_bool(kwargs["in_order"], "in_order") and num_workers > 0:
        raise ValueError(
            "seeder.DataLoader cannot resume in_order=False with num_workers > 0: batches reach "
            "the training loop in whichever order the workers finish, so the batches handed out "
            "are not the first k of the epoch and a resume would repeat some and skip others. Drop "
            "in_order=False, or use torch.utils.data.DataLoader (no exact resume)"
        )
    return shuffle


def check_batch_count(num_samples: int, batch_size: int, drop_last: bool) -> None:
    """Refuse more than ``2**32`` batches per epoch and rank: the batch index is one 32-bit word of
    the batch seeds' key.

    >>> check_batch_count(2**40, 1, False)
    Traceback (most recent call last):
    ...
    ValueError: seeder.DataLoader would have 1099511627776 batches per epoch on this rank, more than 2**32: the batch index is one 32-bit word of each batch's seed key. Pass a larger batch_size (or use more ranks)
    """
    batches = num_samples // batch_size if drop_last else -(-num_samples // batch_size)
    if batches > MAX_KEY + 1:
        raise ValueError(
            f"seeder.DataLoader would have {batches} batches per epoch on this rank, more than "
            f"2**32: the batch index is one 32-bit word of each batch's seed key. Pass a larger "
            f"batch_size (or use more ranks)"
        )
