"""The cost of ``seeder locate``'s fingerprints per step: a small transformer and a small CNN.

For each model, one process trains steps (forward, loss, backward, Adam step) without and
with seeder locate's recorder (every tensor operation's inputs and outputs fingerprinted,
written to a file), rounds alternating, and prints the median ms/step of each, their
ratio, the operations recorded per step, the record bytes per step and the peak Python
heap of one step (tracemalloc; on CUDA also the peak device memory). The recorder runs
only in the localisation runs of ``seeder locate``, and only up to the first differing
step: this is what those runs pay, not what training pays.

Run: ``python benchmarks/bench_locate.py [--device cpu|cuda] [--rounds N] [--steps N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from seeder._run.record import Recorder  # noqa: E402


def transformer(
    device: str,
) -> tuple[torch.nn.Module, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    """A 2-layer encoder (d_model 64, 4 heads), 16 sequences of 32 tokens, vocabulary 1000."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(1000, 64)
            layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(64, 1000)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.embed(x)))

    model = Model().to(device)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randint(0, 1000, (16, 32), device=device)
        return x, x.roll(1, dims=1)

    return model, batch


def cnn(device: str) -> tuple[torch.nn.Module, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    """Two conv + batch norm + ReLU + pool blocks and a linear head; 32 images of 3x32x32."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, 10),
    ).to(device)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(32, 3, 32, 32, device=device), torch.randint(0, 10, (32,), device=device)

    return model, batch


def step_fn(model: torch.nn.Module, batch: Callable, device: str) -> Callable[[], None]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        x, y = batch()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def timed(step: Callable[[], None], steps: int, record_dir: str = "") -> tuple[float, int, int]:
    """ms/step over ``steps`` steps (recorded into ``record_dir`` if given), ops and bytes."""
    rec = Recorder(record_dir) if record_dir else None
    if rec is not None:
        rec.__enter__()
    t0 = time.perf_counter()
    try:
        for _ in range(steps):
            step()
    finally:
        elapsed = time.perf_counter() - t0
        if rec is not None:
            rec.__exit__(None, None, None)
            rec.close()
    if rec is None:
        return elapsed / steps * 1e3, 0, 0
    path = os.path.join(record_dir, "ops.rank0.jsonl")
    with open(path, encoding="utf-8") as fh:
        ops = sum(1 for line in fh if line.startswith('{"k":"op"'))
    return elapsed / steps * 1e3, ops, os.path.getsize(path)


def peak(step: Callable[[], None], record_dir: str = "") -> tuple[float, float]:
    """Peak Python heap (KiB, tracemalloc) and peak device memory (MiB; CUDA only) of one step."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    tracemalloc.start()
    timed(step, 1, record_dir)
    heap = tracemalloc.get_traced_memory()[1] / 1024
    tracemalloc.stop()
    dev = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
    return heap, dev


def main(argv: list[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of each (median taken)")
    parser.add_argument("--steps", type=int, default=5, help="training steps per round")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA (torch.cuda.is_available() is False)")
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, python {sys.version.split()[0]}, device {args.device}, "
        f"{args.threads} thread(s); median of {args.rounds} rounds x {args.steps} steps, rounds "
        "alternating"
    )
    print(
        f"{'model':12s} {'baseline ms/step':>17s} {'fingerprinted':>14s} {'ratio':>7s} "
        f"{'ops/step':>9s} "
        f"{'KiB/step':>9s} {'heap KiB base/fp':>17s} {'dev MiB base/fp':>16s}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in (("transformer", transformer), ("cnn", cnn)):
            model, batch = build(args.device)
            step = step_fn(model, batch, args.device)
            step()  # warm up both paths
            timed(step, 1, tmp)
            times: dict[str, list[float]] = {"base": [], "fp": []}
            ops = size = 0
            for _ in range(args.rounds):
                times["base"].append(timed(step, args.steps)[0])
                ms, ops, size = timed(step, args.steps, tmp)
                times["fp"].append(ms)
            base, fp = statistics.median(times["base"]), statistics.median(times["fp"])
            (hb, db), (hf, df) = peak(step), peak(step, tmp)
            print(
                f"{name:12s} {base:17.2f} {fp:14.2f} {fp / base:7.1f} {ops // args.steps:9d} "
                f"{size / args.steps / 1024:9.0f} {hb:8.0f}/{hf:<8.0f} {db:7.1f}/{df:<8.1f}"
            )
            print(f"RATIO fingerprinted / baseline ms per step [{name}] = {fp / base:.2f}")


if __name__ == "__main__":
    main()
