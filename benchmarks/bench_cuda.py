"""CUDA variant of bench_reseed and bench_state: one reseed, and one RNG state capture + restore, with CUDA started.

Compares ``seeder.reseed`` with Lightning's ``seed_everything``, ``accelerate.utils.set_seed``,
``transformers.set_seed`` and ``torch.manual_seed`` (each where installed), and seeder's
``state_dict()`` + ``load_state_dict()`` with Lightning's ``_collect_rng_states`` / ``_set_rng_states``.
Prints medians (us), ratios ours/theirs and memory (tracemalloc peak of one call). Without CUDA it
prints ``skipped: no CUDA`` and exits 0. The timing helpers are bench_reseed's and bench_state's.

Run: ``PYTHONPATH=. python benchmarks/bench_cuda.py [--rounds 21] [--calls 200]``
"""
from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import seeder  # noqa: E402
from bench_reseed import lightning_seed_everything, peak_bytes, per_call_us  # noqa: E402
from bench_state import BASELINE, _collect_rng_states, _set_rng_states, interleaved_medians_us, peak_kib  # noqa: E402


def other_seeders() -> Dict[str, Callable[[int], None]]:
    """The seeding functions of the frameworks that are installed, as ``f(i)``."""
    found: Dict[str, Callable[[int], None]] = {}
    lightning = lightning_seed_everything()
    if lightning is not None:
        found["lightning seed_everything"] = lightning
    try:
        from accelerate.utils import set_seed as accelerate_set_seed

        found["accelerate.utils.set_seed"] = lambda i: accelerate_set_seed(i % 2**32)
    except ImportError:
        pass
    try:
        logging.getLogger("transformers").setLevel(logging.ERROR)
        from transformers import set_seed as transformers_set_seed

        found["transformers.set_seed"] = lambda i: transformers_set_seed(i % 2**32)
    except ImportError:
        pass
    found["torch.manual_seed"] = lambda i: torch.manual_seed(i)
    return found


def bench_reseed(rounds: int, calls: int) -> None:
    plain = seeder.Seeder()
    plain.init(1234)
    full = seeder.Seeder()
    full.init(1234)
    for gen in (random.Random(), random.Random(), np.random.default_rng(), torch.Generator(),
                torch.Generator(device="cuda"), torch.Generator(device="cuda")):
        full.register_generator(gen)
    cases: Dict[str, Callable[[int], None]] = {
        "seeder.reseed": lambda i: plain.reseed(1, i),
        "seeder.reseed + 6 generators (2 CUDA)": lambda i: full.reseed(1, i),
        **other_seeders(),
    }
    results = {name: (per_call_us(fn, rounds, calls), peak_bytes(fn)) for name, fn in cases.items()}
    print(f"\nreseed: median of {rounds} rounds x {calls} calls")
    print(f"{'case':40s} {'median us':>10s} {'peak B':>8s}")
    for name, (us, mem) in results.items():
        print(f"{name:40s} {us:10.2f} {mem:8d}")
    for ours in ("seeder.reseed", "seeder.reseed + 6 generators (2 CUDA)"):
        for theirs in results:
            if not theirs.startswith("seeder"):
                print(f"RATIO {ours} / {theirs} = {results[ours][0] / results[theirs][0]:.3f}")


def bench_state(rounds: int, calls: int) -> None:
    plain = seeder.Seeder()
    plain.init(1234)
    plain.reseed(1, 0)
    full = seeder.Seeder()
    full.init(1234)
    for gen in (random.Random(), np.random.default_rng(), torch.Generator(), torch.Generator(device="cuda")):
        full.register_generator(gen)
    full.reseed(1, 0)
    rows: List[tuple] = [
        (f"Lightning ({BASELINE})", lambda: _set_rng_states(_collect_rng_states())),
        ("seeder: global RNGs", lambda: plain.load_state_dict(plain.state_dict())),
        ("seeder: + 4 generators (1 CUDA)", lambda: full.load_state_dict(full.state_dict())),
    ]
    for _, fn in rows:
        fn()
    torch.cuda.synchronize()
    medians = interleaved_medians_us([fn for _, fn in rows], rounds, calls)
    print(f"\nstate capture+restore: median of {rounds} rounds x {calls} pairs")
    print(f"{'case':40s} {'median us':>10s} {'peak KiB':>9s}")
    for (name, fn), us in zip(rows, medians):
        print(f"{name:40s} {us:10.1f} {peak_kib(fn):9.1f}")
    for (name, _), us in zip(rows[1:], medians[1:]):
        print(f"RATIO {name} / Lightning = {us / medians[0]:.3f}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("skipped: no CUDA (torch.cuda.is_available() is False)")
        return 0
    torch.set_num_threads(1)
    torch.zeros(1, device="cuda")  # CUDA started: every case seeds and saves live devices
    before = torch.cuda.memory_allocated()
    print(f"torch {torch.__version__}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}")
    bench_reseed(args.rounds, args.calls)
    bench_state(args.rounds, args.calls)
    print(f"\nCUDA memory allocated by the benchmark: {torch.cuda.memory_allocated() - before} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
