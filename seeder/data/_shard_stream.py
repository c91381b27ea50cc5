"""The worker side of :class:`seeder.IterableDataLoader` over a sharded stream.

What torch's workers (or the main process with 0 workers) iterate in place of the user's dataset:
worker ``w`` reads the shards dealt to it (:mod:`seeder.data._shards`) one after the other, each
from its start position, seeds the RNGs its examples draw from (``sample_rngs``, the others
watched, as the elastic loader does: :class:`seeder.data._elastic.SampleSeeding`) before every
example from the example's own key, and batches the examples across shard ends. Each batch comes
with the worker's progress right after it, ``{"cursor": c, "pos": p}``: the shards before ``c`` in
its list ended, shard ``c`` is at position ``p``. A last ``(None, record)`` with ``"end": True``
says the worker is exhausted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable, Optional

import torch
import torch.utils.data

from seeder.data._elastic import PositionSeeds, SampleSeeding
from seeder.data._shards import fresh_assignment, open_shard, shard_order, virtual_position
from seeder.data._streams import set_epoch_of
from seeder.data._workers import SeedSource, fetch_adapters, generator_words

__all__ = ["ShardStream"]

_END = object()

#: What one read of a global RNG's state costs, in seedings of it (about; CPython 3.11, NumPy 2).
#: An RNG that ``sample_rngs`` leaves out is watched (its state read before and after each batch)
#: only in batches of more examples than two reads cost: else seeding it before every example
#: costs less, and is exact whatever the examples draw.
_READ_COST = {"python": 5, "numpy": 32, "torch": 3}


class ShardStream(torch.utils.data.IterableDataset):
    """The user's sharded stream, batched, each example seeded by (shard, position).

    ``control`` is a shared ``int64`` tensor ``[epoch, generation]`` the main process writes before
    each epoch; ``plan`` (``{"generation", "assignment", "workers"}``) is the deal and the
    workers' records the iteration of that generation starts from.
    """

    def __init__(
        self,
        dataset: Any,
        source: SeedSource,
        batch_size: Optional[int],
        drop_last: bool,
        collate_fn: Callable[[Any], Any],
        num_workers: int,
        rank: int,
        world_size: int,
        task: int,
        num_shards: int,
        sample_rngs: tuple[str, ...],
    ):
        self.dataset, self.source = dataset, source
        self.batch_size, self.drop_last, self.collate_fn = batch_size, drop_last, collate_fn
        self.num_workers, self.rank, self.world_size = num_workers, rank, world_size
        self.task, self.num_shards, self.sample_rngs = task, num_shards, sample_rngs
        self.control = torch.zeros(2, dtype=torch.int64).share_memory_()
        self.plan: Optional[dict[str, Any]] = None

    def __iter__(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        epoch, generation = (int(v) for v in self.control.tolist())
        plan = self.plan
        if plan is not None and plan["generation"] == generation:
            return self._produce(worker, epoch, plan["assignment"][worker], plan["workers"][worker])
        # a persistent worker in a later epoch: loading a state restarts the workers, so an
        # epoch they did not start with is a fresh one, dealt as the main process deals it
        workers = max(self.num_workers, 1)
        dealt = fresh_assignment(
            self.num_shards, self.rank, self.world_size, workers, self.shard_order(epoch)
        )
        shards = dealt[worker]
        record = {"produced": 0, "done": False, "state": {"cursor": 0, "pos": 0}}
        return self._produce(worker, epoch, shards, record)

    def shard_order(self, epoch: int) -> list[int]:
        """The order epoch ``epoch`` deals the shards in
        (:func:`seeder.data._shards.shard_order`)."""
        return shard_order(self.dataset, self.num_shards, epoch)

    def _seeding(self) -> SampleSeeding:
        """This process's seeding of the examples (a forked worker starts from its parent's)."""
        seeding = self.__dict__.get("_sample_seeding")
        if seeding is None:
            take = 1 if self.batch_size is None else self.batch_size
            seeded = [
                a
                for a in fetch_adapters()
                if a.name in self.sample_rngs or 2 * _READ_COST.get(a.name, 0) >= take
            ]
            seeding = self.__dict__["_sample_seeding"] = SampleSeeding(
                seeded,
                [a for a in fetch_adapters() if a not in seeded],
                "seeder.IterableDataLoader",
            )
        return seeding

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_sample_seeding"}

    def _produce(
        self, worker: int, epoch: int, shards: list[list[int]], record: dict[str, Any]
    ) -> Iterator[tuple[Any, dict[str, Any]]]:
        end = {"worker": worker, "end": True}
        if record["done"]:
            yield None, end
            return
        master, _, _, gens = self.source.inputs("seeder.IterableDataLoader")
        width = generator_words(gens)
        seeding = self._seeding()
        seeds = PositionSeeds()
        ds, task, count = self.dataset, self.task, self.num_shards
        set_epoch_of(ds, epoch)
        cursor, pos = int(record["state"]["cursor"]), int(record["state"]["pos"])
        produced = int(record["produced"])
        take = 1 if self.batch_size is None else self.batch_size
        items: list[Iterator[Any]] = []  # the shard being read, once opened

        def get(_: int) -> Any:
            return next(items[0], _END)

        while True:
            got: list[Any] = []
            while len(got) < take and cursor < len(shards):
                shard = shards[cursor][0]
                if not items:
                    items.append(open_shard(ds, shard, pos, count))
                want = take - len(got)
                words = seeds.words(master, task, epoch, virtual_position(shard, pos), want, width)
                out = seeding.fetch(get, range(want), words, gens, width)
                n = next((k for k, x in enumerate(out) if x is _END), want)
                got.extend(out[:n])
                pos += n
                if n < want:  # the shard ended: the next one from its start
                    cursor = cursor + 1
                    items.clear()
                    pos = shards[cursor][1] if cursor < len(shards) else 0
            if not got or (self.drop_last and len(got) < take):
                yield None, end
                return
            produced += 1
            batch = self.collate_fn(got[0] if self.batch_size is None else got)
            yield (
                batch,
                {
                    "worker": worker,
                    "produced": produced,
                    "state": {"cursor": cursor, "pos": pos},
                },
            )
