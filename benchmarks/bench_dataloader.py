"""seeder.DataLoader against torch's DataLoader(shuffle=True): throughput, seeding overhead, resume latency.

Run: PYTHONPATH=. nice python benchmarks/bench_dataloader.py [--workers 0 2] [--repeats 5]
Prints medians and ratios (ours/theirs); the machine is shared, so re-run when the spread is wide.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
import torch.utils.data

import seeder


class Busy(torch.utils.data.Dataset):
    """Items that cost about ``us`` microseconds of CPU each and draw from torch's RNG."""

    def __init__(self, n: int, us: float):
        self.n, self.us = n, us

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + self.us * 1e-6
        while time.perf_counter() < end:
            pass
        return torch.rand(2) + i


def epoch_time(loader) -> float:
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


def compare(n: int, us: float, workers: int, repeats: int, batch_size: int) -> None:
    s = seeder.default_seeder()
    ds = Busy(n, us)
    ours = seeder.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0)
    theirs = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers,
                                         persistent_workers=workers > 0)
    a, b = [], []
    for r in range(repeats):
        s.reseed(1, r)
        a.append(epoch_time(ours))
        b.append(epoch_time(theirs))
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"  {us:6.0f} us/item  workers={workers}: seeder {n / ma:9.0f} items/s, torch {n / mb:9.0f} items/s, "
          f"throughput ratio {mb / ma:.3f}")


def seeding_overhead(n: int, batch_size: int, repeats: int) -> None:
    """Per-sample cost of per-batch seeding: seeder.DataLoader vs the same loader with seeding skipped (0 workers)."""
    s = seeder.default_seeder()
    ds = Busy(n, 0)
    ours = seeder.DataLoader(ds, batch_size=batch_size, shuffle=True)
    theirs = torch.utils.data.DataLoader(ds, batch_size=batch_size, shuffle=True)
    a, b = [], []
    for r in range(repeats):
        s.reseed(1, 100 + r)
        a.append(epoch_time(ours))
        b.append(epoch_time(theirs))
    extra = (statistics.median(a) - statistics.median(b)) / n * 1e6
    print(f"  seeding + bookkeeping overhead, batch_size={batch_size}: {extra:.2f} us/sample (ours - torch, 0 workers)")


def resume_latency(n: int, workers: int, repeats: int) -> None:
    s = seeder.default_seeder()
    s.reseed(1, 0)
    ds = Busy(n, 0)
    src = seeder.DataLoader(ds, batch_size=64, shuffle=True)
    it = iter(src)
    next(it)
    state = src.state_dict()
    state = {**state, "batch": len(src) // 2, "position": len(src) // 2 * 64}
    own, total = [], []
    for _ in range(repeats):
        loader = seeder.DataLoader(ds, batch_size=64, shuffle=True, num_workers=workers)
        t0 = time.perf_counter()
        loader.load_state_dict(state)
        keys = iter(loader.batch_sampler)  # seeder's share: the position and the first batch's indices
        next(keys)
        t1 = time.perf_counter()
        next(iter(loader))
        t2 = time.perf_counter()
        own.append(t1 - t0)
        total.append(t2 - t0)
    print(f"  resume at N={n:.0e}, batch {len(src) // 2}: seeder's own work {statistics.median(own) * 1e3:.2f} ms, "
          f"first batch after load {statistics.median(total) * 1e3:.1f} ms (workers={workers}; worker start-up is torch's)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    seeder.init(0)
    print("epoch throughput (median of", args.repeats, "epochs):")
    for workers in args.workers:
        compare(20000, 3, workers, args.repeats, 64)
        compare(1000, 200, workers, args.repeats, 64)
    seeding_overhead(20000, 64, args.repeats)
    seeding_overhead(20000, 8, args.repeats)
    for workers in args.workers:
        resume_latency(10**8, workers, 3)
    print(f"  peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
