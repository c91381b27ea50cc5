"""Shared pieces of the Hugging Face tests: a tiny model returning {"loss": ...}, a dataset with
random augmentation."""

from __future__ import annotations

import random

import numpy as np
import torch


class Augmented(torch.utils.data.Dataset):
    """Fixed data; each item is augmented with Python ``random``, NumPy's and torch's global
    RNGs."""

    def __init__(self, n: int = 96, dim: int = 8):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = self.x[i] * float(np.random.uniform(0.9, 1.1)) + 0.1 * torch.randn(self.x.shape[1])
        x = torch.roll(x, random.randint(-1, 1))
        return {"x": x, "labels": self.y[i]}


class Tiny(torch.nn.Module):
    """A two-layer classifier with dropout that returns ``{"loss": ..., "logits": ...}`` as Trainer
    expects."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2)
        )

    def forward(self, x, labels=None):
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out
