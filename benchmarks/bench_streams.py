"""seeder.IterableDataLoader over a sharded stream against torch's DataLoader over the same stream.

Same process, epochs interleaved between the loaders (each round starts with the next one); medians.
Prints:

* throughput (items/s) at each ``--workers`` and ``--us`` (CPU microseconds per item): torch's
  ``DataLoader`` (each worker reads its shards), ours seeding ``random``, NumPy and torch before
  every example (the default ``sample_rngs``), and ours told the items draw from torch only
  (``sample_rngs=["torch"]``); ``throughput ratio ours/torch`` for both, and seeder's cost per
  example (microseconds) from the cheap items;
* against the number of shards: the state's size (bytes of ``torch.save``) after half an epoch, and
  the time from ``load_state_dict`` to the first batch, resumed on the same topology and on another
  worker count (``--workers`` of the state and 0 after it: the shards dealt again, a shard read
  past its position by ``iter_shard(shard, start)``, O(1) here).

``--clock cpu`` times an epoch in CPU time: this process's, plus its DataLoader workers' with
workers (read from ``/proc/<pid>/task/*/schedstat``, Linux), what a machine shared with other jobs
leaves steadier than wall time; the ratio is then CPU per item, torch's over ours. ``--spin cpu``
makes the items spin on their thread's CPU clock rather than on the wall clock (an item preempted
on a loaded machine still costs its ``--us`` of CPU). Both together measure on a shared machine
what each loader costs; wall time on an idle machine is what a run sees.

Run: PYTHONPATH=. nice python benchmarks/bench_streams.py [--workers 0 2] [--us 0 200]
[--items 4000] [--shards 8 64 512 4096] [--repeats 5] [--clock cpu] [--spin cpu]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from pathlib import Path

import torch
import torch.utils.data

import seeder

_spin_clock = [time.perf_counter]


def spin(us: float) -> None:
    clock = _spin_clock[0]
    end = clock() + us * 1e-6
    while clock() < end:
        pass


class BusyShards(torch.utils.data.IterableDataset):
    """``n`` items in ``shards`` shards, each costing about ``us`` microseconds and drawing from
    torch's RNG. Through the protocol (``num_shards``, ``iter_shard``) for seeder; its ``__iter__``
    reads the shards of torch's worker, for torch's ``DataLoader``."""

    def __init__(self, n: int, shards: int, us: float):
        self.n, self.num_shards, self.us = n, shards, us

    def _bounds(self, shard: int) -> tuple[int, int]:
        per = -(-self.n // self.num_shards)
        return shard * per, min(self.n, (shard + 1) * per)

    def iter_shard(self, shard: int, start: int):
        lo, hi = self._bounds(shard)
        for i in range(lo + start, hi):
            spin(self.us)
            yield torch.rand(2) + i

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for shard in range(worker, self.num_shards, workers):
            yield from self.iter_shard(shard, 0)


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = [time.perf_counter]


def _descendants(pid: int) -> list[int]:
    out = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in children.read_text().split():
            out += [int(child), *_descendants(int(child))]
    return out


def family_cpu() -> float:
    """CPU seconds of this process and every process under it (its DataLoader workers)."""
    total = time.process_time()
    for pid in _descendants(os.getpid()):
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[0]) * 1e-9
            except (OSError, ValueError):  # a thread that ended meanwhile
                pass
    return total


def epoch_seconds(loader) -> float:
    """An epoch's time: wall, or with ``--clock cpu`` the CPU time of this process (and its
    workers')."""
    clock = _clock[0]
    if clock is not time.perf_counter and loader.num_workers:
        clock = family_cpu
    t = clock()
    for _ in loader:
        pass
    return clock() - t


def make(kind: str, ds, workers: int, bs: int):
    kw = dict(batch_size=bs, num_workers=workers, persistent_workers=workers > 0)
    if kind == "torch":
        return torch.utils.data.DataLoader(ds, **kw)
    rngs = ["torch"] if kind == "ours torch-only" else None
    return seeder.IterableDataLoader(ds, sample_rngs=rngs, **kw)


def throughput(n: int, shards: int, us: float, workers: int, repeats: int, bs: int) -> None:
    kinds = ["ours", "ours torch-only", "torch"]
    loaders = {k: make(k, BusyShards(n, shards, us), workers, bs) for k in kinds}
    for loader in loaders.values():  # warm up: workers started, first-touch costs paid
        epoch_seconds(loader)
    times: dict = {k: [] for k in kinds}
    for r in range(repeats):
        for k in kinds[r % 3 :] + kinds[: r % 3]:
            times[k].append(epoch_seconds(loaders[k]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"workers={workers} items={n} shards={shards} us/item={us} batch={bs} repeats={repeats}")
    for k in kinds:
        print(f"  {k:16s} {n / med[k]:12.0f} items/s")
    print(
        f"  throughput ratio ours/torch = {med['torch'] / med['ours']:.3f}   torch-only "
        f"sample_rngs: {med['torch'] / med['ours torch-only']:.3f}   seeder per example: "
        f"{(med['ours'] - med['torch']) / n * 1e6:.1f} us, torch-only "
        f"{(med['ours torch-only'] - med['torch']) / n * 1e6:.1f} us"
    )


def state_bytes(state) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return len(buf.getvalue())


def resume(n: int, shard_counts, workers: int, bs: int, repeats: int) -> None:
    for shards in shard_counts:
        loader = make("ours", BusyShards(n, shards, 0), workers, bs)
        it = iter(loader)
        for _ in range(n // bs // 2):
            next(it)
        state = loader.state_dict()
        del it, loader
        row = []
        for label, after in (("same topology", workers), ("to 0 workers", 0)):
            if label == "to 0 workers" and workers == 0:
                continue
            times = []
            for _ in range(repeats):
                again = make("ours", BusyShards(n, shards, 0), after, bs)
                t = time.perf_counter()
                again.load_state_dict(state)
                next(iter(again))
                times.append(time.perf_counter() - t)
            row.append(f"{label} {statistics.median(times) * 1e3:7.1f} ms")
        print(
            f"  shards={shards:5d}: state after half an epoch {state_bytes(state):8d} B; "
            "load_state_dict to first batch: " + " | ".join(row)
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=4000)
    p.add_argument("--us", type=float, nargs="+", default=[0.0, 200.0])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--shards", type=int, nargs="+", default=[8, 64, 512, 4096])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--clock", choices=sorted(CLOCK), default="wall", help="epochs' clock")
    p.add_argument("--spin", choices=sorted(CLOCK), default="wall", help="items' clock")
    a = p.parse_args()
    _clock[0] = CLOCK[a.clock]
    _spin_clock[0] = time.thread_time if a.spin == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    seeder.init(master_seed=0)
    seeder.reseed(1, 0)
    for workers in a.workers:
        for us in a.us:
            throughput(a.items, 8, us, workers, a.repeats, a.batch_size)
        resume(max(a.items, max(a.shards) * 2), a.shards, workers, a.batch_size, a.repeats)


if __name__ == "__main__":
    main()
