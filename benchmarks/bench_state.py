"""seeder's state on the checkpoint path: a save and a load, beside ``torch.save`` of a small model.

Prints the median time of ``seeder.state_dict()`` and of ``seeder.load_state_dict()`` (validation
and rollback copies included), of one capture + restore, and of a ``torch.save`` of a small model's
``state_dict`` (a 2-layer MLP, 32 -> 256 -> 10, to memory), the size of the state serialised by
``torch.save``, the peak Python memory of one capture + restore (tracemalloc), whether the saved
state loads with ``torch.load(weights_only=True)``, and Lightning's
``_collect_rng_states``/``_set_rng_states`` (``lightning.fabric.utilities.seed``, or the standalone
``lightning_fabric``) for reference, all in one process with rounds interleaved.
Run: ``python benchmarks/bench_state.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_medians_us, lightning_seed_module  # noqa: E402

from seeder import Seeder  # noqa: E402

_lightning, BASELINE = lightning_seed_module()
_collect_rng_states, _set_rng_states = _lightning._collect_rng_states, _lightning._set_rng_states


def saved(state: Any) -> tuple[int, str]:
    buf = io.BytesIO()
    torch.save(state, buf)
    size = buf.tell()
    buf.seek(0)
    try:
        torch.load(buf, weights_only=True)
        return size, "loads"
    except Exception as exc:  # what PyTorch >= 2.6 users hit by default
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return size, f"FAILS ({type(exc).__name__}: {first[:90]})"


def peak_kib(fn: Callable[[], Any]) -> float:
    fn()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1024


def seeders() -> tuple[Seeder, Seeder]:
    """A seeder of the global RNGs only, and one with 4 registered generators, both reseeded."""
    plain = Seeder()
    plain.init(1234)
    plain.reseed(1, 0)
    full = Seeder()
    full.init(1234)
    gens = [random.Random(), np.random.default_rng(), np.random.RandomState(), torch.Generator()]
    for g in gens:
        full.register_generator(g)
    full.reseed(1, 0)
    return plain, full


def print_coverage() -> None:
    """What each side's capture holds."""
    print(
        "covers: Lightning = python, numpy, torch CPU, all CUDA devices; no validation before "
        "setting."
    )
    print(
        "        seeder = the same + every other accelerator type, registered generators, "
        "samplers, master seed,"
    )
    print("        rank/world and epoch position; whole state validated before anything is set.")


def versus_lightning(plain: Seeder, full: Seeder, repeat: int, number: int) -> None:
    """Capture + restore beside Lightning's: time, size, peak memory, ``weights_only`` loading."""

    def lightning() -> None:
        _set_rng_states(_collect_rng_states())

    def ours(s: Seeder) -> Callable[[], None]:
        return lambda: s.load_state_dict(s.state_dict())

    rows = [
        (f"Lightning ({BASELINE})", lightning, _collect_rng_states),
        ("seeder: global RNGs", ours(plain), plain.state_dict),
        ("seeder: + 4 registered generators", ours(full), full.state_dict),
    ]
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}; "
        f"median of {repeat} rounds x {number} capture+restore pairs"
    )
    for _, fn, _ in rows:
        fn()  # warm up
    medians = interleaved_medians_us([fn for _, fn, _ in rows], repeat, number)
    results = []
    for (name, fn, capture), us in zip(rows, medians):
        size, wo = saved(capture())
        results.append((name, us, size, peak_kib(fn), wo))
    print(
        f"{'':38s} {'capture+restore':>16s} {'torch.save size':>16s} {'peak mem':>10s}  "
        f"weights_only=True"
    )
    for name, us, size, mem, wo in results:
        print(f"{name:38s} {us:13.1f} us {size / 1000:13.1f} KB {mem:7.1f} KiB  {wo}")
    print_coverage()
    base_us, base_size = results[0][1], results[0][2]
    for name, us, size, _, _ in results[1:]:
        print(f"ours/Lightning's [{name}]: time {us / base_us:.2f}, size {size / base_size:.2f}")


def versus_model_save(plain: Seeder, repeat: int, number: int) -> None:
    """``state_dict`` and ``load_state_dict`` beside a ``torch.save`` of a small model."""
    net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    state = plain.state_dict()

    def model_save() -> None:
        torch.save(net.state_dict(), io.BytesIO())

    def save() -> None:
        plain.state_dict()

    def load() -> None:
        plain.load_state_dict(state)

    for fn in (model_save, save, load):
        fn()
    fns = [model_save, save, load]
    model_us, save_us, load_us = interleaved_medians_us(fns, repeat, number)
    params = sum(p.numel() for p in net.parameters())
    print(
        f"torch.save of a small model (MLP 32-256-10, {params} parameters): {model_us:.1f} us; "
        f"seeder.state_dict() {save_us:.1f} us, seeder.load_state_dict() {load_us:.1f} us "
        "(global RNGs)"
    )
    print(
        f"RATIO seeder state_dict + load_state_dict / torch.save of a small model = "
        f"{(save_us + load_us) / model_us:.3f}"
    )


def main(argv: list[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=31, help="timed rounds (median taken)")
    parser.add_argument("--number", type=int, default=200, help="capture+restore pairs per round")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    plain, full = seeders()
    versus_lightning(plain, full, args.repeat, args.number)
    versus_model_save(plain, args.repeat, args.number)


if __name__ == "__main__":
    main()
