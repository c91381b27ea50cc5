"""seeder.IterableDataLoader against torch's DataLoader and torchdata's StatefulDataLoader.

Same stream, same process, epochs interleaved between the loaders; medians. Prints:
* throughput (items/s) per loader and ``ratio ours/torch``, ``ratio ours/torchdata``;
* the state's size (bytes of torch.save) after half an epoch, ours and torchdata's;
* time from ``load_state_dict`` to the first batch at several stop depths, for a stream with
  ``state_dict`` (ours: O(1)) and one without (ours: a counted replay; torchdata cannot resume it).

Run: PYTHONPATH=. nice python benchmarks/bench_iterable.py [--workers 0 2] [--items 20000]
[--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import warnings

import torch
import torch.utils.data

import seeder


class Busy(torch.utils.data.IterableDataset):
    """``n`` items costing about ``us`` microseconds of CPU each, drawing from torch's RNG; its
    share from seeder."""

    def __init__(self, n: int, us: float):
        self.n, self.us = n, us

    def __iter__(self):
        share = seeder.data.stream_share()  # torch's worker info outside seeder.IterableDataLoader
        for i in range(share.index, self.n, share.count):
            end = time.perf_counter() + self.us * 1e-6
            while time.perf_counter() < end:
                pass
            yield torch.rand(2) + i


class StatefulBusy(Busy):
    """``Busy`` that saves how many items of its share it produced (resumes in O(1))."""

    def __init__(self, n: int, us: float):
        super().__init__(n, us)
        self.pos, self.start = 0, 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]

    def __iter__(self):
        share = seeder.data.stream_share()
        self.pos, self.start = self.start, 0
        for i in range(share.index + self.pos * share.count, self.n, share.count):
            self.pos += 1
            end = time.perf_counter() + self.us * 1e-6
            while time.perf_counter() < end:
                pass
            yield torch.rand(2) + i


def epoch_seconds(loader) -> float:
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


def make(kind: str, ds, workers: int, bs: int):
    kw = dict(batch_size=bs, num_workers=workers, persistent_workers=workers > 0)
    if kind == "ours":
        return seeder.IterableDataLoader(ds, **kw)
    if kind == "torch":
        return torch.utils.data.DataLoader(ds, **kw)
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(ds, **kw)


def throughput(n: int, us: float, workers: int, repeats: int, bs: int) -> None:
    """Epochs of the three loaders in rounds; each round starts with the next loader (no loader
    always runs first or last). Prints items/s from the median epochs, and the median over rounds of
    each round's own ratio."""
    kinds = ["ours", "torch", "torchdata"]
    loaders = {k: make(k, StatefulBusy(n, us), workers, bs) for k in kinds}
    for loader in loaders.values():  # warm up: workers started, first-touch costs paid
        epoch_seconds(loader)
    times: dict = {k: [] for k in kinds}
    for r in range(repeats):
        for k in kinds[r % 3 :] + kinds[: r % 3]:
            times[k].append(epoch_seconds(loaders[k]))
    rate = {k: n / statistics.median(v) for k, v in times.items()}
    paired = {
        k: statistics.median(t / o for t, o in zip(times[k], times["ours"]))
        for k in ("torch", "torchdata")
    }
    print(f"workers={workers} items={n} us/item={us} batch={bs} repeats={repeats}")
    for k in kinds:
        print(f"  {k:9s} {rate[k]:12.0f} items/s")
    print(
        f"  throughput ratio ours/torch = {rate['ours'] / rate['torch']:.3f}   "
        f"ours/torchdata = {rate['ours'] / rate['torchdata']:.3f}   (median of the rounds' own "
        f"ratios: {paired['torch']:.3f}, {paired['torchdata']:.3f})"
    )


def saved_after(kind: str, ds, workers: int, bs: int, batches: int):
    loader = make(kind, ds, workers, bs)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    state = loader.state_dict()
    del it
    return state


def state_bytes(state) -> int:
    buf = io.BytesIO()
    torch.save(state, buf)
    return len(buf.getvalue())


def resume_seconds(kind: str, ds_type, n: int, us: float, workers: int, bs: int, state) -> float:
    loader = make(kind, ds_type(n, us), workers, bs)
    t = time.perf_counter()
    loader.load_state_dict(state)
    next(iter(loader))
    return time.perf_counter() - t


def resume(n: int, us: float, workers: int, bs: int, depths, repeats: int) -> None:
    per_epoch = n // bs
    half = saved_after("ours", StatefulBusy(n, us), workers, bs, per_epoch // 2)
    theirs = saved_after("torchdata", StatefulBusy(n, us), workers, bs, per_epoch // 2)
    print(
        f"  state after half an epoch: ours {state_bytes(half)} B, torchdata "
        f"{state_bytes(theirs)} B"
    )
    for depth in depths:
        stop = max(1, int(per_epoch * depth))
        row = []
        for label, kind, ds_type in (
            ("ours stateful", "ours", StatefulBusy),
            ("torchdata stateful", "torchdata", StatefulBusy),
            ("ours replayed", "ours", Busy),
        ):
            state = saved_after(kind, ds_type(n, us), workers, bs, stop)
            t = statistics.median(
                resume_seconds(kind, ds_type, n, us, workers, bs, state) for _ in range(repeats)
            )
            row.append(f"{label} {t * 1e3:8.1f} ms")
        print(
            f"  resume to first batch, stop at {depth:.0%} of the epoch (batch {stop}): "
            + " | ".join(row)
        )


def main() -> None:
    # torchdata's StatefulDataLoader seeds random, NumPy and torch in the main process when it
    # resumes with 0 workers; seeder routes such calls and warns (the baseline runs routed: its
    # speed does not depend on the values drawn)
    warnings.filterwarnings(
        "ignore",
        message=r".* seeds the global RNGs after seeder.init",
        category=seeder.SeederWarning,
    )
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=20000)
    p.add_argument("--us", type=float, default=20.0, help="CPU microseconds per item")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.5, 0.9])
    a = p.parse_args()
    torch.set_num_threads(1)
    seeder.init(master_seed=0)
    seeder.reseed(1, 0)
    for workers in a.workers:
        throughput(a.items, a.us, workers, a.repeats, a.batch_size)
        resume(a.items, a.us, workers, a.batch_size, a.depths, a.repeats)


if __name__ == "__main__":
    main()
