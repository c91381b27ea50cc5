#!/usr/bin/env python
"""A LightningCLI script with seeder: reproducible from one master seed, resumed bit for bit from
Lightning's checkpoints.

Shaped like Lightning's own CLI examples (a LightningModule and a LightningDataModule whose
arguments the CLI exposes)::

    python examples/lightning_cli.py fit --trainer.max_epochs 3
    SEEDER_SEED=42 python examples/lightning_cli.py fit --trainer.max_epochs 3    # replay a run
    seeder verify -- python examples/lightning_cli.py fit --trainer.max_epochs 3

What seeder needs here: ``seeder.init()`` and ``seeder.reseed(0, 0)`` before the CLI builds the
model, ``seed_everything_default=False`` (the CLI must not seed after seeder), ``SeederCallback``
in ``trainer_defaults``, and ``seeder.DataLoader`` in ``train_dataloader()``. The master seed
comes from ``$SEEDER_SEED``; without it one is drawn and printed on stderr.
"""

import random

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.cli import LightningCLI

import seeder
from seeder.integrations.lightning import SeederCallback


class Noisy(torch.utils.data.Dataset):
    """A fixed regression task; each item is augmented with random, NumPy and torch draws."""

    def __init__(self, n: int):
        xs = torch.linspace(-1, 1, n)
        self.x = torch.stack([xs, xs**2, xs.sin(), xs.cos()], 1)
        self.y = (2 * xs + 0.5)[:, None]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i] * float(np.random.uniform(0.9, 1.1)) + 0.05 * torch.randn(4)
        return torch.roll(x, random.randint(-1, 1)), self.y[i]


class Regressor(pl.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(hidden, 1),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class NoisyData(pl.LightningDataModule):
    def __init__(self, samples: int = 48, batch_size: int = 8, workers: int = 0):
        super().__init__()
        self.samples, self.batch_size, self.workers = samples, batch_size, workers

    def train_dataloader(self):
        return seeder.DataLoader(
            Noisy(self.samples), batch_size=self.batch_size, shuffle=True, num_workers=self.workers
        )


def main() -> None:
    seeder.init()  # the master seed: $SEEDER_SEED, else drawn from OS entropy and printed
    seeder.reseed(0, 0)  # before the CLI builds the model: the initial weights come from the seed
    LightningCLI(
        Regressor,
        NoisyData,
        seed_everything_default=False,
        save_config_callback=None,
        trainer_defaults={
            "callbacks": [SeederCallback()],
            "accelerator": "cpu",
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
        },
    )


if __name__ == "__main__":
    main()
