"""Median cost of one reseed: seeder.reseed vs the bare seeding calls vs Lightning's seed_everything.

Run: python benchmarks/bench_reseed.py [--rounds 21] [--calls 200]
All in one process; medians over rounds; ratios are ours / theirs; memory is the tracemalloc peak of one call.
"""
from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
import tracemalloc
from typing import Callable, Dict, Optional

import numpy as np
import torch

import seeder


def per_call_us(fn: Callable[[int], None], rounds: int, calls: int) -> float:
    counter = [0]
    medians = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            counter[0] += 1
            fn(counter[0])
        medians.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(medians)


def peak_bytes(fn: Callable[[int], None]) -> int:
    fn(10**6)
    tracemalloc.start()
    fn(10**6 + 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def lightning_seed_everything() -> Optional[Callable[[int], None]]:
    try:
        from lightning_fabric.utilities.seed import seed_everything
    except ImportError:
        try:
            from lightning.fabric.utilities.seed import seed_everything  # type: ignore
        except ImportError:
            return None
    logging.getLogger("lightning_fabric").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    return lambda i: seed_everything(i % 2**32, verbose=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    s = seeder.Seeder()
    s.init(1234)
    t = seeder.Seeder()
    t.init(1234)
    for _ in range(4):
        t.register_generator(random.Random())
    gen_objs = [np.random.default_rng(), torch.Generator()]
    for g in gen_objs:
        t.register_generator(g)

    def bare(i: int) -> None:
        random.seed(i)
        np.random.seed(i % 2**32)
        torch.manual_seed(i)

    cases: Dict[str, Callable[[int], None]] = {
        "seeder.reseed": lambda i: s.reseed(1, i),
        "seeder.reseed + 6 generators": lambda i: t.reseed(1, i),
        "bare random+np+torch.manual_seed": bare,
        "torch.manual_seed alone": lambda i: torch.manual_seed(i),
    }
    lightning = lightning_seed_everything()
    if lightning is not None:
        cases["lightning seed_everything"] = lightning

    devices = ["cpu"] + [a for a in seeder.rngs.accelerator_types()]
    print(f"torch {torch.__version__}, numpy {np.__version__}, devices seeded by seeder: {devices}")
    results = {}
    for name, fn in cases.items():
        results[name] = (per_call_us(fn, args.rounds, args.calls), peak_bytes(fn))
    ours = results["seeder.reseed"][0]
    print(f"{'case':36s} {'median us':>10s} {'peak B':>8s} {'ours/this':>10s}")
    for name, (us, mem) in results.items():
        print(f"{name:36s} {us:10.2f} {mem:8d} {ours / us:10.3f}")
    if lightning is not None:
        ratio = ours / results["lightning seed_everything"][0]
        print(f"RATIO seeder.reseed / lightning seed_everything = {ratio:.3f} (target <= 0.25)")
        ratio6 = results["seeder.reseed + 6 generators"][0] / results["lightning seed_everything"][0]
        print(f"RATIO seeder.reseed + 6 generators / lightning seed_everything = {ratio6:.3f}")
    else:
        print("lightning not installed: pip install lightning-fabric to compare")


if __name__ == "__main__":
    main()
