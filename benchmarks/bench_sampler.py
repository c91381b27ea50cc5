"""Benchmark: seeder.DistributedSampler (both modes) against torch.utils.data.DistributedSampler.

For each N (8 replicas, rank 0), in this one process:
  * first  - time from iter(sampler) to the first index
  * epoch  - time from iter(sampler) to the end of one rank's epoch (indices consumed at C speed)
  * resume - time from load_state_dict(middle of the epoch) to the next index; torch's sampler
             cannot resume, so its figure is iter() plus skipping the first half (islice)
  * memory - peak RSS growth over building the sampler and one epoch, measured in a fresh child
             process per case (the peak RSS of a process never goes down, so each case gets its own)
Then the per-sample seeding overhead of seeder.data.SeededDataset.

Prints medians over --repeats runs and ratios ours/torch (< 1 means faster).
Targets, feistel mode: first index and resume <= 1 ms at every N, epoch at N=1e8
>= 15x faster than torch, extra memory <= 16 MiB; per-sample overhead <= 25 us.

    PYTHONPATH=. python benchmarks/bench_sampler.py                      # N = 1e6 1e7 1e8 1e9
    PYTHONPATH=. python benchmarks/bench_sampler.py --sizes 1e6 1e7 --repeats 5
"""

from __future__ import annotations

import argparse
import collections
import itertools
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.utils.data

import seeder
from seeder import DistributedSampler
from seeder.data import SeededDataset

KINDS = ("torch", "seeder-torch", "seeder-feistel")


class Sized:
    """A dataset that is only a length (samplers never touch items)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


def make(kind: str, n: int, replicas: int, rank: int, s: seeder.Seeder) -> Any:
    if kind == "torch":
        sampler = torch.utils.data.DistributedSampler(
            Sized(n), num_replicas=replicas, rank=rank, seed=12345
        )
    else:
        sampler = DistributedSampler(
            Sized(n), num_replicas=replicas, rank=rank, mode=kind.split("-")[1], seeder=s
        )
    sampler.set_epoch(3)
    return sampler


def first_and_epoch(sampler: Any) -> tuple:
    t0 = time.perf_counter()
    it = iter(sampler)
    next(it)
    t1 = time.perf_counter()
    collections.deque(it, maxlen=0)
    return t1 - t0, time.perf_counter() - t0


def resume(kind: str, sampler: Any) -> float:
    half = len(sampler) // 2
    if kind == "torch":
        t0 = time.perf_counter()
        next(itertools.islice(iter(sampler), half, None))
        return time.perf_counter() - t0
    state = sampler.state_dict()
    state["position"] = half
    t0 = time.perf_counter()
    sampler.load_state_dict(state)
    next(iter(sampler))
    return time.perf_counter() - t0


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    """This process's peak RSS (VmHWM; unlike ru_maxrss it does not inherit the parent's peak across
    exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_memory(kind: str, n: int, replicas: int, rank: int) -> Optional[float]:
    """Peak RSS growth (bytes) of building the sampler and running one epoch, in a fresh child
    process.

    The child runs this script with ``--memory-case``; a fresh process (not a fork: torch's
    thread pools do not survive fork) makes the peak that case's alone.
    """
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--memory-case",
        kind,
        str(n),
        str(replicas),
        str(rank),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    for line in out.stdout.splitlines():
        if line.startswith("PEAK "):
            return float(line.split()[1])
    print(f"   memory case {kind} N={n} failed: {out.stderr[-500:]}")
    return None


def memory_case(kind: str, n: int, replicas: int, rank: int) -> None:
    s = seeder.Seeder()
    s.init(2024)
    first_and_epoch(make(kind, 1000, replicas, rank, s))  # imports and first-call paths
    base = _rss()
    first_and_epoch(make(kind, n, replicas, rank, s))
    print(f"PEAK {max(0, _hwm() - base)}")


def fmt_time(t: Optional[float]) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.2f} s"


def fmt_mem(b: Optional[float]) -> str:
    return "-" if b is None else f"{b / 2**20:.1f} MiB"


def fmt_ratio(ours: Optional[float], theirs: Optional[float]) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "-"
    r = ours / theirs
    return f"{r:.1e}" if r < 0.01 else f"{r:.3f}"


def bench_sampler(
    sizes: list[int],
    replicas: int,
    rank: int,
    repeats: int,
    torch_max: int,
    memory_of: Sequence[str] = KINDS,
) -> None:
    s = seeder.Seeder()
    s.init(2024)
    for kind in KINDS:  # warm up imports and first-call paths outside the timings
        first_and_epoch(make(kind, 1000, replicas, rank, s))
    print(
        f"\n== samplers: {replicas} replicas, rank {rank}, medians of {repeats}; ratio = ours "
        f"/ torch's"
    )
    print(
        f"{'N':>12} {'sampler':>15} {'first':>11} {'epoch':>10} {'resume':>11} {'memory':>11} "
        f"{'first/t':>8} {'epoch/t':>8} {'resume/t':>9} {'mem/t':>7}"
    )
    for n in sizes:
        rows: dict[str, dict[str, Optional[float]]] = {}
        for kind in KINDS:
            if kind != "seeder-feistel" and n > torch_max:
                rows[kind] = {"first": None, "epoch": None, "resume": None, "memory": None}
                continue
            firsts, epochs, resumes = [], [], []
            for _ in range(repeats):
                sampler = make(kind, n, replicas, rank, s)
                f, e = first_and_epoch(sampler)
                firsts.append(f)
                epochs.append(e)
                resumes.append(resume(kind, sampler))
                del sampler
            rows[kind] = {
                "first": statistics.median(firsts),
                "epoch": statistics.median(epochs),
                "resume": statistics.median(resumes),
                "memory": peak_memory(kind, n, replicas, rank) if kind in memory_of else None,
            }
        base = rows["torch"]
        for kind in KINDS:
            r = rows[kind]
            if r["epoch"] is None:
                print(
                    f"{n:>12.0e} {kind:>15}   skipped (N > --torch-max {torch_max:.0e}: torch's "
                    f"sampler needs ~{n * 45 / 2**30:.0f} GiB here)"
                )
                continue
            print(
                f"{n:>12.0e} {kind:>15} {fmt_time(r['first']):>11} {fmt_time(r['epoch']):>10} "
                f"{fmt_time(r['resume']):>11} {fmt_mem(r['memory']):>11} "
                f"{fmt_ratio(r['first'], base['first']):>8} "
                f"{fmt_ratio(r['epoch'], base['epoch']):>8} "
                f"{fmt_ratio(r['resume'], base['resume']):>9} "
                f"{fmt_ratio(r['memory'], base['memory']):>7}"
            )
        if base["epoch"] is not None and rows["seeder-feistel"]["epoch"]:
            print(
                f"{'':>12} feistel epoch speed-up over torch: "
                f"{base['epoch'] / rows['seeder-feistel']['epoch']:.1f}x"
            )
        sys.stdout.flush()


class Noisy(torch.utils.data.Dataset):
    """Items that draw from every global RNG, as augmentations do."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> float:
        return i + random.random() + float(np.random.random()) + float(torch.rand(()))


def bench_per_sample(repeats: int, count: int = 20000, batch: int = 32) -> None:
    s = seeder.Seeder()
    s.init(2024)
    plain = Noisy()
    s.register_generator(random.Random())
    wrapped = SeededDataset(Noisy(), seeder=s)
    keys = [(0, i) for i in range(count)]

    def per_item(fn: Callable[[], Any]) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) / count)
        return statistics.median(times)

    base = per_item(lambda: [plain[i] for i in range(count)])
    cases = [
        (
            "worker, one item per call (__getitem__)",
            lambda: [wrapped._fetch_per_sample([k], False) for k in keys],
        ),
        (
            f"worker, batch {batch} (__getitems__)",
            lambda: [
                wrapped._fetch_per_sample(keys[j : j + batch], False)
                for j in range(0, count, batch)
            ],
        ),
        (
            f"main process, batch {batch}, RNGs restored per batch",
            lambda: [
                wrapped._fetch_per_sample(keys[j : j + batch], True) for j in range(0, count, batch)
            ],
        ),
    ]
    print(
        f"\n== per-sample seeds: SeededDataset over an item drawing from python, numpy and torch, "
        f"one registered random.Random; medians of {repeats} x {count} items"
    )
    print(f"   {'item alone':<55} {base * 1e6:7.2f} us")
    for name, fn in cases:
        t = per_item(fn)
        print(
            f"   {name:<55} {t * 1e6:7.2f} us   overhead {(t - base) * 1e6:6.2f} us / sample "
            f"(target <= 25 us)"
        )


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes", nargs="+", type=float, default=[1e6, 1e7, 1e8, 1e9], help="dataset sizes N"
    )
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--torch-max",
        type=float,
        default=1e8,
        help="largest N for torch's sampler and mode='torch' (1e9 needs > 24 GiB)",
    )
    ap.add_argument("--skip-per-sample", action="store_true")
    ap.add_argument(
        "--per-sample-items", type=int, default=20000, help="items per timing, per-sample part"
    )
    ap.add_argument(
        "--memory-of",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        help="the samplers whose peak memory is measured (each in a fresh process)",
    )
    ap.add_argument(
        "--memory-case", nargs=4, metavar=("KIND", "N", "REPLICAS", "RANK"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.memory_case:
        kind, n, replicas, rank = args.memory_case
        memory_case(kind, int(n), int(replicas), int(rank))
        return
    print(
        f"python {sys.version.split()[0]}, torch {torch.__version__}, numpy {np.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    bench_sampler(
        [int(n) for n in args.sizes],
        args.replicas,
        args.rank,
        args.repeats,
        int(args.torch_max),
        args.memory_of,
    )
    if not args.skip_per_sample:
        bench_per_sample(args.repeats, args.per_sample_items)


if __name__ == "__main__":
    main()
