"""What ``loader.indices_at`` and a skip list cost.

In this one process:
  * indices_at - microseconds to answer one batch at the middle of an epoch, against reaching the
                 same batch by iterating the loader's sampler (torch's and any replaying loader's
                 way); at several dataset sizes and batch sizes: indices_at grows with the batch,
                 not with the dataset or the position.
  * skip list  - time per batch handed out over an epoch of a seeder.DataLoader with a skip list in
                 that epoch (--skips single batches, spread over it) and without one; epochs
                 interleaved, medians.

Prints medians and ratios. Targets: indices_at under 1 ms for a batch of 2048 at any N; the skip
list's ratio within noise of 1.

    PYTHONPATH=. python benchmarks/bench_provenance.py
    PYTHONPATH=. python benchmarks/bench_provenance.py --sizes 1e6 --batches 32 --repeats 3
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import time

import torch
from timing import interleaved_medians_us  # benchmarks/ is on sys.path when a benchmark runs

import seeder


class Sized(torch.utils.data.Dataset):
    """A dataset that is only a length (indices_at never fetches)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def answer_vs_iterate(n: int, batch: int, repeats: int, s: seeder.Seeder) -> None:
    loader = seeder.DataLoader(Sized(n), batch_size=batch, shuffle=True, seeder=s)
    b = min(len(loader) // 2, 2**20 // batch)  # iterating further would take minutes
    answer = [0.0] * repeats
    walk = [0.0] * repeats
    for r in range(repeats):
        t0 = time.perf_counter()
        got = loader.indices_at(3, b)
        answer[r] = time.perf_counter() - t0
        t0 = time.perf_counter()
        it = iter(loader.sampler.blocks(3))
        flat = itertools.chain.from_iterable(block.tolist() for block in it)
        collections.deque(itertools.islice(flat, b * batch), maxlen=0)
        walked = list(itertools.islice(flat, batch))
        walk[r] = time.perf_counter() - t0
        assert walked == got, "indices_at differs from iteration"
    a, w = statistics.median(answer) * 1e6, statistics.median(walk) * 1e6
    print(
        f"N={n:.0e} batch={batch:5d} at batch {b:8d}: indices_at {a:9.1f} us   "
        f"iterating there {w:12.1f} us   ratio indices_at/iterate {a / w:.4f}"
    )


def skip_list(n_batches: int, batch: int, skips: int, repeats: int, s: seeder.Seeder) -> None:
    data = torch.arange(n_batches * batch)
    plain = seeder.DataLoader(data, batch_size=batch, seeder=s)
    skipping = seeder.DataLoader(data, batch_size=batch, seeder=s)
    skips = min(skips, n_batches // 2)
    every = max(1, n_batches // max(skips, 1))
    skipping.skip(s.last_reseed[1], list(range(every // 2, n_batches, every))[:skips])
    kept = n_batches - len(skipping.skipped(s.last_reseed[1]))

    def epoch(loader: seeder.DataLoader):
        return lambda: collections.deque(loader, maxlen=0)

    base, ours = interleaved_medians_us([epoch(plain), epoch(skipping)], repeats, 1)
    per_base, per_ours = base / n_batches, ours / kept
    print(
        f"epoch of {n_batches} batches of {batch}, {n_batches - kept} skipped: "
        f"{per_ours:.2f} us per batch handed out, {per_base:.2f} without a skip list"
    )
    print(f"RATIO skip list / none, time per batch handed out: {per_ours / per_base:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e9])
    p.add_argument("--batches", nargs="+", type=int, default=[32, 256, 2048])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--epoch-batches", type=int, default=4096)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--skips", type=int, default=64)
    args = p.parse_args()
    s = seeder.Seeder()
    s.init(12345)
    s.reseed(1, 0)
    print("indices_at: one batch answered, against iterating to it (medians)")
    for n, batch in itertools.product(args.sizes, args.batches):
        answer_vs_iterate(int(n), batch, args.repeats, s)
    print("skip list: time per batch handed out (interleaved medians)")
    skip_list(args.epoch_batches, args.batch, args.skips, args.repeats, s)


if __name__ == "__main__":
    main()
