"""The flags of the examples/train.py contract that seeder verify drives, shared by the verify toy
scripts."""

import argparse


def contract_parser(epochs: int = 4) -> argparse.ArgumentParser:
    """A parser with --seed, --epochs, --ckpt-dir, --resume, --stop-after-epochs, --stop-after-steps
    and --metrics."""
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop-after-epochs", type=int, default=None)
    p.add_argument("--stop-after-steps", type=int, default=None)
    p.add_argument("--metrics", default=None)
    return p


def regression_task(n: int, dropout: float):
    """A fixed regression data set ``(x, y)`` of ``n`` samples (not part of the experiment's
    randomness) and a small model with dropout, built from torch's global RNG after ``seeder.init``
    and ``seeder.reseed(0, 0)``."""
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(16, 1)
    )
    return x, y, model
