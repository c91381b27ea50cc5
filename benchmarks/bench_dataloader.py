"""seeder.DataLoader against torch's DataLoader and torchdata's StatefulDataLoader, in the same
process.

Run: PYTHONPATH=. nice python benchmarks/bench_dataloader.py [--workers 0 2] [--batches 8 64 256]
[--repeats 7]
     [--clock cpu]   (0-worker epochs in this process's CPU time: on a machine others are using)

Prints, for each (workers, batch size, item cost): the median epoch time of each loader (rounds
interleaved, so machine load hits all three alike), the ratio ours/torch in throughput with its
goal, and seeder's own cost per batch next to its floor (the sum of the primitive calls seeder makes
per batch, each measured here). The items draw from ``random``, NumPy and torch (a cheap
augmentation); ``shuffle=True``, persistent workers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timing import interleaved_medians_us  # noqa: E402

import seeder  # noqa: E402

try:
    from torchdata.stateful_dataloader import StatefulDataLoader
except ImportError:  # the comparison column is left out
    StatefulDataLoader = None

_epochs = iter(
    range(10**9)
)  # every measured epoch gets a new reseed epoch (a repeated reseed warns)
#: (item cost in us, batch size) -> the throughput goal ours / torch
GOALS = {(3, 8): 0.90, (3, 64): 0.97}


def goal(us: float, batch: int) -> float:
    return GOALS.get((us, batch), 0.99 if us >= 100 else 0.0)


class Augmented(torch.utils.data.Dataset):
    """Items that cost about ``us`` microseconds of CPU each and draw from ``random``, NumPy and
    torch."""

    def __init__(self, n: int, us: float):
        self.n, self.us = n, us

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.perf_counter() + self.us * 1e-6
        while time.perf_counter() < end:
            pass
        return torch.rand(2) + (i + random.random() + float(np.random.random()))


#: How an epoch is timed: wall time, or (``--clock cpu``, for a loaded machine) this process's CPU
#: time, which leaves out the time other processes hold the cores; worker processes are timed by the
#: wall clock either way.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]


def epoch_time(loader) -> float:
    now = clock if loader.num_workers == 0 else time.perf_counter
    t = now()
    for _ in loader:
        pass
    return now() - t


class Free(torch.utils.data.Dataset):
    """Items that cost nothing (the index itself): what is left of an epoch is the loaders' own
    work."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def as_list(batch: list) -> list:
    return batch


def loaders(ds, batch: int, workers: int, **extra) -> dict[str, object]:
    kw = dict(
        batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=workers > 0, **extra
    )
    out = {"seeder": seeder.DataLoader(ds, **kw), "torch": torch.utils.data.DataLoader(ds, **kw)}
    if StatefulDataLoader is not None:
        out["torchdata"] = StatefulDataLoader(ds, **kw)
    return out


def compare(n: int, us: float, workers: int, batch: int, repeats: int) -> dict[str, float]:
    """Median epoch time (s) of each loader, rounds interleaved; the first epoch of each is a
    warm-up.

    ``us < 0``: items that cost nothing and no collation (:class:`Free`)."""
    found = (
        loaders(Free(n), batch, workers, collate_fn=as_list)
        if us < 0
        else loaders(Augmented(n, us), batch, workers)
    )
    times: dict[str, list[float]] = {k: [] for k in found}
    for r in range(repeats + 1):
        seeder.default_seeder().reseed(1, next(_epochs))
        for name, loader in found.items():
            t = epoch_time(loader)
            if r:
                times[name].append(t)
    return {k: statistics.median(v) for k, v in times.items()}


def own_cost_us(batch: int, repeats: int) -> float:
    """seeder's cost per batch, 0 workers: (seeder - torch) per batch over items that cost nothing,
    not collated."""
    n = 256 * batch
    med = compare(n, -1, 0, batch, repeats)
    return (med["seeder"] - med["torch"]) / (n // batch) * 1e6


def fetch_side_us(repeat: int) -> float:
    """seeder's work per batch in the process that fetches (a worker): seeding before a fetch of no
    items."""
    from seeder.data._batches import BatchSeedingDataset
    from seeder.data._workers import SeedSource

    view = BatchSeedingDataset([], SeedSource(seeder.default_seeder()))
    master, batches = seeder.get_master_seed(), iter(range(2**32 - 1))
    saved = random.getstate(), np.random.get_state(), torch.default_generator.get_state()
    cost = interleaved_medians_us(
        [lambda: view.__getitems__((master, 1, 7, 0, next(batches), []))], repeat, 2000, clock
    )[0]
    random.setstate(saved[0])
    np.random.set_state(saved[1])
    torch.default_generator.set_state(saved[2])
    return cost


def primitives(repeat: int) -> dict[str, float]:
    """Each primitive call seeder makes per batch, alone (us): the seeding calls, and the state
    copies around a fetch."""
    inst, rs, gen = random._inst, np.random.mtrand._rand, torch.default_generator
    seed = 0x1234_5678_9ABC_DEF0
    py_state, np_state, torch_state = random.getstate(), np.random.get_state(), gen.get_state()
    kind, key, *rest = np_state

    calls = {
        "random seed (C)": lambda: random.Random.__mro__[1].seed(inst, seed),
        "numpy legacy seed": lambda: rs.seed(seed & 0xFFFFFFFF),
        "torch manual_seed": lambda: gen.manual_seed(seed),
        "torch get_state": gen.get_state,
        "torch set_state": lambda: gen.set_state(torch_state),
        "random getstate": random.getstate,
        "random setstate": lambda: random.setstate(py_state),
        "numpy get_state": np.random.get_state,
        # the key as a list, as seeder puts it back (NumPy copies an array's words 40x slower)
        "numpy set_state": lambda: np.random.set_state((kind, key.tolist(), *rest)),
    }
    times = interleaved_medians_us(list(calls.values()), repeat, 2000, clock)
    random.setstate(py_state)
    np.random.set_state(np_state)
    gen.set_state(torch_state)
    return dict(zip(calls, times))


def floor_us(p: dict[str, float], workers: int) -> float:
    """The primitive calls per batch: three seeds; with 0 workers also a copy out and back of each
    global RNG through its public state API (getstate/setstate, get_state/set_state)."""
    seeds = p["random seed (C)"] + p["numpy legacy seed"] + p["torch manual_seed"]
    if workers:
        return seeds
    return (
        seeds
        + p["random getstate"]
        + p["random setstate"]
        + p["numpy get_state"]
        + p["numpy set_state"]
        + p["torch get_state"]
        + p["torch set_state"]
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--batches", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--costs", type=float, nargs="+", default=[3, 200], help="item costs in us")
    p.add_argument(
        "--items", type=int, default=8192, help="items per epoch at 3 us (fewer for dearer items)"
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="time 0-worker epochs by wall time or by this process's CPU time (a shared machine)",
    )
    args = p.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    seeder.init(0)
    prims = primitives(
        max(args.repeats, 3)
    )  # measured with the chosen clock, like seeder's own cost
    print(f"primitive calls (median us per call, {args.clock} clock):")
    for name, t in prims.items():
        print(f"  {name:28s} {t:6.2f}")
    print(
        f"\nepoch time, median of {args.repeats} epochs (ms, 0 workers: {args.clock} clock); "
        "throughput ratio = torch time / seeder time"
    )
    print("| workers, batch | item | seeder | torch | torchdata | seeder / torch | goal |")
    print("|---|---|---|---|---|---|---|")
    for workers in args.workers:
        for batch in args.batches:
            for us in args.costs:
                n = args.items if us < 100 else max(args.items // 8, 4 * batch)
                med = compare(n, us, workers, batch, args.repeats)
                ratio = med["torch"] / med["seeder"]
                g = goal(us, batch)
                verdict = f">= {g:.2f} {'met' if ratio >= g else 'NOT met'}" if g else "-"
                td = f"{med['torchdata'] * 1e3:.1f}" if "torchdata" in med else "n/a"
                print(
                    f"| {workers}, {batch} | {us:.0f} us | {med['seeder'] * 1e3:.1f} | "
                    f"{med['torch'] * 1e3:.1f} | {td} | throughput ratio {ratio:.3f} | {verdict} |",
                    flush=True,
                )
    fetch, fl = fetch_side_us(max(args.repeats, 3)), floor_us(prims, 2)
    print(
        f"\nseeder's own cost per batch against its floor (the sum of the primitive calls it "
        f"makes):\n  in the fetching process (a worker): {fetch:6.1f} us per batch, floor {fl:.1f} "
        f"us, ratio {fetch / fl:.2f} (goal <= 2.00)"
    )
    print(
        "  0 workers, whole loader (seeder - torch over items that cost nothing), with the "
        "save/restore:"
    )
    seeder.default_seeder().reseed(1, next(_epochs))
    for batch in args.batches:
        own = own_cost_us(batch, args.repeats)
        fl = floor_us(prims, 0)
        print(
            f"    batch {batch:4d}: {own:6.1f} us per batch, floor {fl:.1f} us, ratio "
            f"{own / fl:.2f} (goal <= 2.00)"
        )


if __name__ == "__main__":
    main()
