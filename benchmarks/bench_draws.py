"""What counting the global RNGs' draws costs per optimizer step under ``seeder verify``.

Run: PYTHONPATH=. nice python benchmarks/bench_draws.py [--draws 0 1000 100000] [--repeat 15]
     [--number 20]

Under ``seeder verify`` each optimizer step's record holds how many numbers torch's CPU
generator, NumPy's global RNG and Python's ``random`` gave out since the previous step
(:mod:`seeder._run.draws`). For a step that draws ``N`` numbers from torch's generator
(``torch.randint`` of ``N`` values, as a nanoGPT-style batch), rounds interleaved:

- baseline: the draw alone;
- counted: the draw, then what the step hook does (read the three states, search the stream
  for the new state of each from the previous one).

Prints the median time of each in microseconds, and a RATIO line per size. A last row is the
step after a reseed, where no count is found and the whole search limit is spent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_medians_us  # noqa: E402

from seeder._run.draws import drawn, mt_states  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, nargs="+", default=[0, 1000, 100000])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    previous = {"states": mt_states()}

    def count() -> None:
        now = mt_states()
        for name, state in now.items():
            drawn(previous["states"][name], state)
        previous["states"] = now

    print(f"{'numbers drawn a step':>20}  {'baseline us':>12}  {'counted us':>12}  {'cost us':>10}")
    for n in args.draws:

        def baseline(n: int = n) -> None:
            if n:
                torch.randint(1 << 30, (n,))

        def counted(n: int = n) -> None:
            baseline(n)
            count()

        base, with_count = interleaved_medians_us([baseline, counted], args.repeat, args.number)
        print(f"{n:>20}  {base:>12.1f}  {with_count:>12.1f}  {with_count - base:>10.1f}")
        print(f"RATIO counted / baseline step [{n} numbers] {with_count / max(base, 1e-3):.3g}")

    seeds = iter(range(1, 1 << 30))

    def after_reseed() -> None:
        torch.manual_seed(next(seeds))  # a reseed: the new state is on no stream of the old one
        count()

    (reseeded,) = interleaved_medians_us([after_reseed], max(1, args.repeat // 5), 1)
    print(f"{'after a reseed':>20}  {'':>12}  {reseeded:>12.1f}  (no count found: the whole limit)")


if __name__ == "__main__":
    main()
