"""CUDA variant of bench_reseed and bench_state: one reseed, and one RNG state capture + restore,
with CUDA started.

Compares ``seeder.reseed`` with Lightning's ``seed_everything``, ``accelerate.utils.set_seed``,
``transformers.set_seed`` and ``torch.manual_seed`` (each where installed), and seeder's
``state_dict()`` + ``load_state_dict()`` with Lightning's ``_collect_rng_states`` /
``_set_rng_states``. Prints medians (us), ratios ours/theirs and memory (tracemalloc peak of one
call). Without CUDA it
prints ``skipped: no CUDA`` and exits 0. Rounds alternate between the cases (``timing.py``); every
reseed call seeds a new epoch, as training does. Targets: reseed <= 0.25x and reseed with
6 generators <= 0.35x Lightning's ``seed_everything``; state capture + restore <= 0.5x Lightning's.

Run: ``PYTHONPATH=. python benchmarks/bench_cuda.py [--rounds 21] [--calls 200]``
(``--device cpu`` runs the same cases without CUDA: it checks the script, its figures mean nothing).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_reseed import counted, peak_bytes  # noqa: E402
from bench_state import peak_kib  # noqa: E402
from timing import interleaved_medians_us, lightning_seed_module  # noqa: E402

import seeder  # noqa: E402

TARGETS = {"seeder.reseed": 0.25, "seeder.reseed + 6 generators": 0.35, "seeder: global RNGs": 0.5}


def lightning_or_none() -> Optional[Any]:
    """Lightning's ``utilities.seed`` module where Lightning is installed, else ``None``."""
    try:
        return lightning_seed_module()[0]
    except SystemExit:
        return None


def other_seeders() -> dict[str, Callable[[int], None]]:
    """The seeding functions of the frameworks that are installed, as ``f(i)``."""
    found: dict[str, Callable[[int], None]] = {}
    lightning = lightning_or_none()
    if lightning is not None:
        logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
        logging.getLogger("lightning_fabric").setLevel(logging.ERROR)
        found["lightning seed_everything"] = lambda i: lightning.seed_everything(
            i % 2**32, verbose=False
        )
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


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def bench_reseed(rounds: int, calls: int, device: str) -> None:
    plain = seeder.Seeder()
    plain.init(1234)
    full = seeder.Seeder()
    full.init(1234)
    for gen in (
        random.Random(),
        random.Random(),
        np.random.default_rng(),
        torch.Generator(),
        torch.Generator(device=device),
        torch.Generator(device=device),
    ):
        full.register_generator(gen)
    cases: dict[str, Callable[[int], None]] = {
        "seeder.reseed": lambda i: plain.reseed(1, i),
        "seeder.reseed + 6 generators": lambda i: full.reseed(1, i),
        **other_seeders(),
    }
    fns = [counted(fn) for fn in cases.values()]
    for fn in fns:
        fn()  # warm up
    synchronize(device)
    medians = interleaved_medians_us(fns, rounds, calls)
    results = {name: (us, peak_bytes(fn)) for (name, fn), us in zip(cases.items(), medians)}
    print(
        f"\nreseed: median of {rounds} interleaved rounds x {calls} calls; 6 generators = 2 "
        f"random.Random, a NumPy Generator, a CPU and two {device} torch.Generators"
    )
    print(f"{'case':40s} {'median us':>10s} {'peak B':>8s}")
    for name, (us, mem) in results.items():
        print(f"{name:40s} {us:10.2f} {mem:8d}")
    for ours in ("seeder.reseed", "seeder.reseed + 6 generators"):
        for theirs in results:
            if not theirs.startswith("seeder"):
                print(ratio_line(ours, theirs, results[ours][0] / results[theirs][0]))


def bench_state(rounds: int, calls: int, device: str) -> None:
    plain = seeder.Seeder()
    plain.init(1234)
    plain.reseed(1, 0)
    full = seeder.Seeder()
    full.init(1234)
    for gen in (
        random.Random(),
        np.random.default_rng(),
        torch.Generator(),
        torch.Generator(device=device),
    ):
        full.register_generator(gen)
    full.reseed(1, 0)
    rows: list[tuple] = [
        ("seeder: global RNGs", lambda: plain.load_state_dict(plain.state_dict())),
        (
            f"seeder: + 4 generators (1 on {device})",
            lambda: full.load_state_dict(full.state_dict()),
        ),
    ]
    lightning = lightning_or_none()
    if lightning is None:
        print("\nstate capture+restore: no baseline (Lightning is not installed)")
        return
    rows.insert(
        0,
        (
            "Lightning _collect/_set_rng_states",
            lambda: lightning._set_rng_states(lightning._collect_rng_states()),
        ),
    )
    for _, fn in rows:
        fn()
    synchronize(device)
    medians = interleaved_medians_us([fn for _, fn in rows], rounds, calls)
    print(f"\nstate capture+restore: median of {rounds} rounds x {calls} pairs")
    print(f"{'case':40s} {'median us':>10s} {'peak KiB':>9s}")
    for (name, fn), us in zip(rows, medians):
        print(f"{name:40s} {us:10.1f} {peak_kib(fn):9.1f}")
    for (name, _), us in zip(rows[1:], medians[1:]):
        print(ratio_line(name, "Lightning _collect/_set_rng_states", us / medians[0]))


def ratio_line(ours: str, theirs: str, ratio: float) -> str:
    """``RATIO ours / theirs = r``, with its target where ``ours`` has one against Lightning."""
    target = (
        TARGETS.get(ours)
        if theirs.startswith("Lightning") or theirs.startswith("lightning")
        else None
    )
    verdict = (
        f" (target <= {target}: {'met' if ratio <= target else 'NOT met'})"
        if target is not None
        else ""
    )
    return f"RATIO {ours} / {theirs} = {ratio:.3f}{verdict}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA (torch.cuda.is_available() is False)")
        return 0
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    if cuda:
        torch.zeros(1, device="cuda")  # CUDA started: every case seeds and saves live devices
    before = torch.cuda.memory_allocated() if cuda else 0
    what = (
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
        if cuda
        else "CPU only (a check of the script)"
    )
    print(
        f"torch {torch.__version__}, {what}, numpy {np.__version__}, python "
        f"{sys.version.split()[0]}"
    )
    bench_reseed(args.rounds, args.calls, args.device)
    bench_state(args.rounds, args.calls, args.device)
    if cuda:
        print(
            f"\nCUDA memory allocated by the benchmark: {torch.cuda.memory_allocated() - before} B"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
