"""What each private layout in seeder/_seeding/fastrng.py gains per epoch over its public fallback.

Run: PYTHONPATH=. nice python benchmarks/bench_hotpaths.py [--items 4096] [--batch 64] [--repeats 7]
     [--clock cpu]

Two per-batch paths read Python's and NumPy's Mersenne Twister in place (entries of
seeder/_internals.py); where the layout check fails they take ``getstate``/``get_state`` instead.
This runs the same loader epochs with the private layouts and with the public fallback, rounds
interleaved in one process (0 workers: the main process fetches), and prints the median epoch time
of each, the per-epoch difference and the ratio:

- ``keep``: ``seeder.DataLoader`` copies the training loop's ``random``, NumPy and torch states
  before each batch it fetches and puts them back after
  (:meth:`seeder._seeding.rngbase.RNGAdapter.keep`);
- ``watch``: ``seeder.ElasticDataLoader(sample_rngs=("torch",))`` also compares Python's and NumPy's
  global RNGs before and after each batch (:meth:`seeder._seeding.rngbase.RNGAdapter.watcher`).

The fallback is switched on as a failed layout check would (the checked offsets forgotten), without
the warning.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_elastic import TorchOnly  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)

import seeder  # noqa: E402
from seeder._seeding import fastrng  # noqa: E402
from seeder.data import _elastic as elastic  # noqa: E402
from seeder.data import _workers as workers  # noqa: E402

_epochs = iter(range(1, 10**9))
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def use_private(private: bool) -> None:
    """The private layouts (checked at first use), or the public fallback a failed check leaves."""
    fastrng._PY_MT[:] = [] if private else [None]
    fastrng._LEGACY[:] = [] if private else [None]
    for adapter in workers.fetch_adapters():  # the adapters' cached views
        if hasattr(adapter, "_view"):
            adapter._view = False
        if hasattr(adapter, "_fast"):
            adapter._fast = None
    elastic._PROCESS.clear()  # the elastic loader's watchers are built again


def epoch(loader: Any, clock: Callable[[], float]) -> float:
    seeder.reseed(1, next(_epochs))
    t = clock()
    for _ in loader:
        pass
    return clock() - t


def compare(loader: Any, repeats: int, clock: Callable[[], float]) -> dict[str, float]:
    times: dict[bool, list[float]] = {True: [], False: []}
    for private in (True, False):  # warm-up
        use_private(private)
        epoch(loader, clock)
    for r in range(repeats):
        for private in (True, False) if r % 2 == 0 else (False, True):
            use_private(private)
            times[private].append(epoch(loader, clock))
    use_private(True)
    diffs = [pub - priv for pub, priv in zip(times[False], times[True])]
    return {
        "private": statistics.median(times[True]),
        "public": statistics.median(times[False]),
        "gain": statistics.median(diffs),
    }


def main(argv: list[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", seeder.SeederWarning)
    seeder.init(1234)
    clock = CLOCKS[args.clock]
    ds = TorchOnly(args.items)
    cases = {
        "keep  (seeder.DataLoader, 0 workers)": seeder.DataLoader(
            ds, batch_size=args.batch, shuffle=True
        ),
        "watch (ElasticDataLoader, sample_rngs=('torch',), 0 workers)": seeder.ElasticDataLoader(
            ds, batch_size=args.batch, shuffle=True, sample_rngs=("torch",)
        ),
    }
    batches = -(-args.items // args.batch)
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}; "
        f"{args.items} items, batch {args.batch} ({batches} batches), median of {args.repeats} "
        f"epochs ({args.clock} clock)"
    )
    for name, loader in cases.items():
        r = compare(loader, args.repeats, clock)
        print(
            f"{name}: epoch private {r['private'] * 1e3:.2f} ms, public {r['public'] * 1e3:.2f} "
            f"ms; gain {r['gain'] * 1e3:.2f} ms per epoch ({r['gain'] / batches * 1e6:.1f} us "
            "per batch)"
        )
        ratio = r["public"] / r["private"]
        print(f"RATIO {name.split()[0]}: public / private epoch time = {ratio:.3f}")


if __name__ == "__main__":
    main()
