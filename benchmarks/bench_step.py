"""seeder's overhead per training step and per epoch of a small real model and loader.

Run: PYTHONPATH=. nice python benchmarks/bench_step.py [--workers 0 2] [--items 2048] [--batch 32]
     [--repeats 5] [--save-every 50] [--clock cpu]
     (--clock cpu: 0-worker epochs in this process's CPU time, on a machine others are using)

Trains a 2-layer MLP (32 -> 256 -> 10, SGD, CPU, one thread) on items that draw from ``random``,
NumPy and torch (a cheap augmentation), one epoch per round, two ways, rounds interleaved:

- baseline: torch's ``DataLoader`` (``shuffle=True``), no seeder;
- seeder: ``seeder.DataLoader`` with the same arguments, ``seeder.reseed(1, epoch)`` at each epoch
  start and a ``seeder.state_dict()`` every ``--save-every`` steps (kept in memory, as a checkpoint
  would take it).

Prints, for each worker count: the median epoch time of each, seeder's overhead per epoch and per
step (median of the per-round differences) and the ratio seeder / baseline; then the peak Python
memory of one epoch (tracemalloc, a separate untimed epoch) of each.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import seeder  # noqa: E402

FEATURES, HIDDEN, CLASSES = 32, 256, 10
_epochs = iter(
    range(1, 10**9)
)  # every epoch of the process gets a new reseed epoch (a repeated reseed warns)


class Augmented(torch.utils.data.Dataset):
    """Random features and a label; each item draws a little noise from ``random``, NumPy, torch."""

    def __init__(self, n: int):
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, FEATURES, generator=gen)
        self.y = torch.randint(0, CLASSES, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Any:
        noise = 0.01 * (random.random() + float(np.random.random()))
        return self.x[i] + noise + 0.01 * torch.randn(FEATURES), self.y[i]


def model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
    )


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class Run:
    """One way to train: a loader, a model and optimizer, and what runs around epochs and steps."""

    def __init__(self, loader: Any, with_seeder: bool, save_every: int):
        self.loader, self.with_seeder, self.save_every = loader, with_seeder, save_every
        self.net = model()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.states: list[Any] = []

    def one_epoch(self) -> int:
        """Train one epoch; the number of steps."""
        if self.with_seeder:
            seeder.reseed(1, next(_epochs))
        steps = 0
        for x, y in self.loader:
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            steps += 1
            if self.with_seeder and steps % self.save_every == 0:
                self.states = [
                    seeder.state_dict()
                ]  # what a checkpoint every save_every steps takes
        return steps


def timed(run: Run, clock: Callable[[], float]) -> float:
    t = clock()
    run.one_epoch()
    return clock() - t


def peak_kib(run: Run) -> float:
    tracemalloc.start()
    run.one_epoch()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1024


def compare(
    items: int, batch: int, workers: int, repeats: int, save_every: int, clock_name: str
) -> dict[str, Any]:
    ds = Augmented(items)
    kw: dict[str, Any] = dict(
        batch_size=batch, shuffle=True, num_workers=workers, persistent_workers=workers > 0
    )
    runs = {
        "torch": Run(torch.utils.data.DataLoader(ds, **kw), False, save_every),
        "seeder": Run(seeder.DataLoader(ds, **kw), True, save_every),
    }
    clock = (
        CLOCKS[clock_name] if workers == 0 else time.perf_counter
    )  # workers' time: the wall clock only
    times: dict[str, list[float]] = {k: [] for k in runs}
    steps = runs["torch"].one_epoch()
    runs["seeder"].one_epoch()  # warm-up: workers started, caches filled
    for r in range(repeats):
        order = list(runs.items()) if r % 2 == 0 else list(reversed(runs.items()))
        for name, run in order:
            times[name].append(timed(run, clock))
    diffs = [s - t for s, t in zip(times["seeder"], times["torch"])]
    return {
        "steps": steps,
        "torch": statistics.median(times["torch"]),
        "seeder": statistics.median(times["seeder"]),
        "diff": statistics.median(diffs),
        "mem": {k: peak_kib(v) for k, v in runs.items()},
    }


def main(argv: list[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--items", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed epochs of each (median taken)"
    )
    parser.add_argument(
        "--save-every", type=int, default=50, help="steps between two seeder.state_dict() calls"
    )
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    seeder.init(1234)
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}; "
        f"MLP {FEATURES}-{HIDDEN}-{CLASSES}, {args.items} items, batch {args.batch}, state_dict "
        f"every {args.save_every} steps, median of {args.repeats} epochs "
        f"({args.clock} clock for 0 workers)"
    )
    for workers in args.workers:
        r = compare(args.items, args.batch, workers, args.repeats, args.save_every, args.clock)
        steps = r["steps"]
        ms, mem = {k: r[k] * 1e3 for k in ("torch", "seeder", "diff")}, r["mem"]
        print(
            f"workers {workers}: epoch ({steps} steps) torch DataLoader {ms['torch']:.1f} ms, "
            f"seeder {ms['seeder']:.1f} ms; seeder's overhead {ms['diff']:.2f} ms per epoch, "
            f"{ms['diff'] / steps * 1e3:.1f} us per step"
        )
        print(
            f"workers {workers}: peak Python memory of one epoch: torch DataLoader "
            f"{mem['torch']:.0f} KiB, seeder {mem['seeder']:.0f} KiB"
        )
        print(
            f"RATIO workers {workers}: seeder / torch epoch time = {r['seeder'] / r['torch']:.3f}"
        )


if __name__ == "__main__":
    main()
