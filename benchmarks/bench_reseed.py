"""Median cost of one reseed: seeder.reseed vs the bare seeding calls vs Lightning's
seed_everything.

Run: python benchmarks/bench_reseed.py [--rounds 21] [--calls 200]
All in one process; rounds alternate between the cases (a load spike hits them all alike); medians
over rounds; ratios are ours / theirs; memory is the tracemalloc peak of one call. Every call
reseeds a new epoch, as training does (nothing is served from a cache of the same epoch).
Lightning's ``seed_everything`` comes from the installed ``lightning`` package. The second seeder
case adds 6 registered generators
(4 random.Random, a NumPy Generator, a torch.Generator), which ``seed_everything`` does not seed.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_medians_us, lightning_seed_module  # noqa: E402

import seeder  # noqa: E402
from seeder._seeding.rngs_torch import accelerator_types  # noqa: E402

RATIOS = ("seeder.reseed", "seeder.reseed + 6 generators")


def peak_bytes(fn: Callable[[int], None]) -> int:
    fn(10**6)
    tracemalloc.start()
    fn(10**6 + 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def counted(fn: Callable[[int], None]) -> Callable[[], None]:
    """``fn`` called with 1, 2, 3, ...: a new epoch (or seed) at every call."""
    counter = [0]

    def call() -> None:
        counter[0] += 1
        fn(counter[0])

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    lightning, baseline = lightning_seed_module()
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    logging.getLogger("lightning_fabric").setLevel(logging.ERROR)

    s = seeder.Seeder()
    s.init(1234)
    t = seeder.Seeder()
    t.init(1234)
    for _ in range(4):
        t.register_generator(random.Random())
    for g in (np.random.default_rng(), torch.Generator()):
        t.register_generator(g)

    def bare(i: int) -> None:
        random.seed(i)
        np.random.seed(i % 2**32)
        torch.manual_seed(i)

    cases: dict[str, Callable[[int], None]] = {
        "seeder.reseed": lambda i: s.reseed(1, i),
        "seeder.reseed + 6 generators": lambda i: t.reseed(1, i),
        "bare random+np+torch.manual_seed": bare,
        "torch.manual_seed alone": lambda i: torch.manual_seed(i),
        "lightning seed_everything": lambda i: lightning.seed_everything(i % 2**32, verbose=False),
    }
    devices = ["cpu"] + accelerator_types()
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, devices seeded by seeder: {devices}; "
        f"baseline {baseline}; median of {args.rounds} interleaved rounds x {args.calls} calls"
    )
    fns = [counted(fn) for fn in cases.values()]
    for fn in fns:
        fn()  # warm up
    medians = interleaved_medians_us(fns, args.rounds, args.calls)
    results = {name: (us, peak_bytes(fn)) for (name, fn), us in zip(cases.items(), medians)}
    theirs = results["lightning seed_everything"][0]
    print(f"{'case':36s} {'median us':>10s} {'peak B':>8s} {'/lightning':>10s}")
    for name, (us, mem) in results.items():
        print(f"{name:36s} {us:10.2f} {mem:8d} {us / theirs:10.3f}")
    for name in RATIOS:
        print(f"RATIO {name} / lightning seed_everything = {results[name][0] / theirs:.3f}")


if __name__ == "__main__":
    main()
