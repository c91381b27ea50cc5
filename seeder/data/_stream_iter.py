"""The iterator of :class:`seeder.IterableDataLoader`: batches handed out in a fixed round robin.

Worker ``0, 1, ..., 0, 1, ...``, an exhausted worker skipped, whatever order the batches
arrive in: each batch comes with its worker's record (batches produced, the dataset's state
after it), and the position moves only as a batch is handed to the training loop, so
batches the workers prefetched are not in the state. :meth:`StreamIter.exhausted` looks
ahead without moving it (for a training loop that must know the last batch of the epoch).

Example:
    >>> import torch, seeder
    >>> class Count(torch.utils.data.IterableDataset):
    ...     def __iter__(self): return iter(range(3))
    >>> s = seeder.Seeder(); s.init(0)
    >>> it = iter(seeder.IterableDataLoader(Count(), batch_size=2, seeder=s))
    >>> next(it).tolist(), it.exhausted(), next(it).tolist(), it.exhausted()
    ([0, 1], False, [2], True)
"""

from __future__ import annotations

import collections
from typing import Any

from seeder._seeding.rngbase import next_keeping
from seeder.data._workers import fetch_adapters

__all__ = ["StreamIter"]

_STALE = (
    "this iterator of seeder.IterableDataLoader was started before loader.load_state_dict(): "
    "it stops here instead of yielding batches that the loaded state does not continue. Call "
    "iter(loader) again (a new for loop) to continue from the loaded position"
)


class StreamIter:
    """What ``iter(loader)`` returns: batches in the round robin, counted as handed out.

    Args:
        loader: the :class:`seeder.IterableDataLoader` (its ``handed``, ``live_token``, ``loads``).
        inner: torch's iterator over the loader's worker stream: ``(batch, record)`` pairs.
        progress: the position this iterator starts from.
        token: the loader's ``live_token`` for this iterator (only the newest moves the position).
    """

    def __init__(self, loader: Any, inner: Any, progress: dict[str, Any], token: object):
        self._loader, self._inner, self._progress, self._token = loader, inner, progress, token
        self._loads = loader.loads
        self._workers = len(progress["workers"])
        self._queues: list[collections.deque[Any]] = [
            collections.deque() for _ in range(self._workers)
        ]
        self._restore = fetch_adapters() if loader.num_workers == 0 else []

    def __iter__(self) -> StreamIter:
        return self

    def _pull(self) -> None:
        # The main process produces with 0 workers: the training loop's streams are put back.
        batch, record = next_keeping(self._restore, self._inner)
        self._queues[record["worker"]].append((batch, record))

    def __next__(self) -> Any:
        loader = self._loader
        live = loader.live_token is self._token
        if not live and loader.loads != self._loads:  # before anything is produced: draws nothing
            raise RuntimeError(_STALE)
        progress = self._progress
        skipped = 0
        while not progress["complete"]:
            w = progress["next_worker"]
            records = progress["workers"]
            if records[w]["done"]:
                skipped += 1
                if skipped > self._workers:  # loaded states are checked for this; never spin
                    raise RuntimeError(
                        f"seeder.IterableDataLoader: every worker of epoch {progress['epoch']} is "
                        "exhausted but the position does not say the epoch is complete; nothing "
                        "is left to yield. Please report this with the loader's state_dict()"
                    )
                progress = self._progress = dict(progress, next_worker=(w + 1) % self._workers)
                continue
            if not self._queues[w]:
                try:
                    self._pull()
                except StopIteration:  # every worker ends with an end record: one died quietly
                    raise RuntimeError(
                        f"seeder.IterableDataLoader: worker {w} stopped without its "
                        "end record; the epoch is incomplete"
                    ) from None
                continue
            skipped = 0
            batch, record = self._queues[w].popleft()
            progress = dict(progress, workers=list(records), next_worker=(w + 1) % self._workers)
            if record.get("end"):
                progress["workers"][w] = dict(records[w], done=True)
                progress["complete"] = all(r["done"] for r in progress["workers"])
            else:
                progress["workers"][w] = {
                    "produced": record["produced"],
                    "state": record["state"],
                    "done": False,
                }
                progress["batch"] += 1
            self._progress = progress
            if live:
                loader.handed(progress)
            if not record.get("end"):
                return batch
        raise StopIteration

    def exhausted(self) -> bool:
        """Whether the epoch has no batch left after those handed out; the position does not move.

        Looks ahead as torch's workers prefetch: the next batch (or the end records that
        follow) is produced and queued, not handed out, so the state stays that of the
        batches the training loop received.

        Returns:
            ``True`` once every worker's next record is its end.
        """
        progress, done = self._progress, [r["done"] for r in self._progress["workers"]]
        if progress["complete"]:
            return True
        w = progress["next_worker"]
        while True:  # ends: each pass pulls from a finite stream, or marks or skips an ended worker
            if all(done):
                return True
            if done[w]:
                w = (w + 1) % self._workers
                continue
            if not self._queues[w]:
                try:
                    self._pull()
                except StopIteration:
                    return False  # __next__ says which worker died
                continue
            if not self._queues[w][0][1].get("end"):
                return False
            done[w] = True
            w = (w + 1) % self._workers
