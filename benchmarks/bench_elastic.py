"""seeder.ElasticDataLoader against the default mode and torch's DataLoader; resume on another world
size.

The elastic loader runs twice: with its default ``sample_rngs`` (Python's, NumPy's and torch's
global RNGs seeded before every sample) and with ``sample_rngs`` naming only what the items draw
from ("declared").

Run: PYTHONPATH=. nice python benchmarks/bench_elastic.py [--workers 0 2] [--repeats 5] [--n-resume
1e8]
     [--clock cpu]   (0-worker epochs in this process's CPU time: on a machine others are using)
Epochs of the three loaders are interleaved; prints medians and ratios (ours/theirs as throughput
ratios: above 1 means faster). The machine is shared, so re-run when the spread is wide.
"""

from __future__ import annotations

import argparse
import statistics
import time

import bench_dataloader  # benchmarks/ is on sys.path when a benchmark runs
import torch
import torch.utils.data
from bench_dataloader import Augmented as Busy
from bench_dataloader import epoch_time

import seeder

_epochs = iter(
    range(10**9)
)  # every measured epoch gets a new reseed epoch (a repeated reseed warns)


def compare(
    n: int, us: float, workers: int, repeats: int, batch_size: int, draws: str = "all"
) -> None:
    """Epoch throughput of the three loaders on items of ``us`` microseconds drawing from ``draws``:
    "none", "torch" (torch only) or "all" (``random``, NumPy and torch)."""
    s = seeder.default_seeder()
    ds = {"none": BusyNoDraws, "torch": BusyTorch, "all": Busy}[draws](n, us)
    kw = dict(
        batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0
    )
    loaders = [
        seeder.ElasticDataLoader(ds, **kw),
        seeder.ElasticDataLoader(ds, sample_rngs=DECLARED[draws], **kw),
        seeder.DataLoader(ds, **kw),
        torch.utils.data.DataLoader(ds, **kw),
    ]
    times = [[], [], [], []]
    for _ in range(repeats):
        s.reseed(1, next(_epochs))
        for t, loader in zip(times, loaders):
            t.append(epoch_time(loader))
    el, dec, de, to = (statistics.median(t) for t in times)
    what = {"none": " (no RNG)", "torch": " (torch only)", "all": ""}[draws]
    print(
        f"  {us:5.0f} us/item{what} workers={workers}: elastic {n / el:8.0f} items/s, declared "
        f"{n / dec:8.0f}, default {n / de:8.0f}, torch {n / to:8.0f}; throughput ratio "
        f"elastic/default {de / el:.3f}, elastic/torch {to / el:.3f}, declared/default "
        f"{de / dec:.3f}, declared/torch {to / dec:.3f}"
    )


#: ``sample_rngs`` naming what the items of each kind draw from.
DECLARED = {"none": (), "torch": ("torch",), "all": ("python", "numpy", "torch")}


class BusyTorch(Busy):
    """Items that cost about ``us`` microseconds of CPU each and draw from torch only (as
    torchvision's transforms do)."""

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + self.us * 1e-6
        while time.perf_counter() < end:
            pass
        return torch.rand(2) + i


class BusyNoDraws(Busy):
    """Items that cost about ``us`` microseconds of CPU each and draw from no RNG (tokenised
    text)."""

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + self.us * 1e-6
        while time.perf_counter() < end:
            pass
        return torch.full((2,), float(i))


class TorchOnly(torch.utils.data.Dataset):
    """Free items drawing from torch's generator only (as torchvision's transforms do)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.rand(2) + i


class NoDraws(TorchOnly):
    """Free items that draw from no RNG."""

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((2,), float(i))


def per_sample_seeding(n: int, batch_size: int, repeats: int, draws: str) -> None:
    """What the elastic loader adds per sample over the default mode (0 workers, free items):
    per-sample seeding, with the default ``sample_rngs`` (all three global RNGs) and with
    ``sample_rngs`` naming what the items draw from."""
    s = seeder.default_seeder()
    what, ds = {
        "none": ("no RNG", NoDraws(n)),
        "torch": ("torch only", TorchOnly(n)),
        "all": ("random, NumPy and torch", Busy(n, 0)),
    }[draws]
    loaders = [
        seeder.ElasticDataLoader(ds, batch_size=batch_size, shuffle=True),
        seeder.ElasticDataLoader(
            ds, batch_size=batch_size, shuffle=True, sample_rngs=DECLARED[draws]
        ),
        seeder.DataLoader(ds, batch_size=batch_size, shuffle=True),
    ]
    times = [[], [], []]
    for _ in range(repeats):
        s.reseed(1, next(_epochs))
        for t, loader in zip(times, loaders):
            t.append(epoch_time(loader))
    el, dec, de = (statistics.median(t) for t in times)
    print(
        f"  per-sample seeding, elastic - default, batch_size={batch_size}, items drawing from "
        f"{what}: {(el - de) / n * 1e6:.2f} us/sample, declared {(dec - de) / n * 1e6:.2f} (0 "
        f"workers)"
    )


def resume_other_world(n: int, repeats: int) -> None:
    """Load a state saved on 4 ranks into a 2-rank loader (rank 1) at mid-epoch; seeder's share up
    to the first batch."""
    s = seeder.default_seeder()
    s.reseed(1, next(_epochs))
    ds = Busy(n, 0)
    src = seeder.ElasticDataLoader(ds, batch_size=16, shuffle=True, num_replicas=4, rank=0)
    state = src.state_dict()
    half = n // 2 // 64 * 64
    state = {**state, "position": half}
    own = []
    for _ in range(repeats):
        loader = seeder.ElasticDataLoader(ds, batch_size=32, shuffle=True, num_replicas=2, rank=1)
        t0 = time.perf_counter()
        loader.load_state_dict(state)
        next(iter(loader))  # 0 workers, items that cost nothing: seeder's work dominates
        own.append(time.perf_counter() - t0)
    print(
        f"  resume at N={n:.0e} saved on 4 ranks, loaded on 2, at sample {half}: seeder's own work "
        f"{statistics.median(own) * 1e3:.3f} ms (load_state_dict + the first batch)"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--items", type=int, default=20000, help="items per epoch of the cheap (3 us) dataset"
    )
    p.add_argument("--n-resume", type=float, default=1e8)
    p.add_argument(
        "--clock",
        choices=sorted(bench_dataloader.CLOCKS),
        default="wall",
        help="cpu: time 0-worker epochs in this process's CPU time (a machine others are using)",
    )
    args = p.parse_args()
    bench_dataloader.clock = bench_dataloader.CLOCKS[args.clock]
    seeder.init(0)
    for draws, what in (
        ("none", "no RNG"),
        ("torch", "torch only"),
        ("all", "random, NumPy and torch"),
    ):
        per_sample_seeding(args.items, 64, args.repeats, draws)
        print(
            f"epoch throughput (median of {args.repeats} interleaved epochs), items drawing "
            f"from {what}:"
        )
        for workers in args.workers:
            compare(args.items, 3, workers, args.repeats, 64, draws)
            if draws == "all":
                compare(max(args.items // 20, 64), 200, workers, args.repeats, 64, draws)
    resume_other_world(int(args.n_resume), 3)


if __name__ == "__main__":
    main()
