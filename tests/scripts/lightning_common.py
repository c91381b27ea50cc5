"""A tiny Lightning task for the SeederCallback tests: random augmentation in the dataset, dropout
in the model.

Imported by tests/test_lightning.py (in-process runs) and tests/scripts/lightning_ddp.py (ddp runs).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch

import seeder
from seeder.integrations.lightning import SeederCallback

SAMPLES, BATCH, DIM = 24, 4, 6


class NoisyDataset(torch.utils.data.Dataset):
    """Fixed data; each item is augmented with draws from random, NumPy and torch."""

    def __init__(self, n: int = SAMPLES):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(n, DIM, generator=g)
        self.y = (self.x.sum(1, keepdim=True) > 0).float()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = self.x[i] * float(np.random.uniform(0.9, 1.1)) + 0.1 * torch.randn(DIM)
        return torch.roll(x, random.randint(-1, 1)), self.y[i]


class Net(pl.LightningModule):
    """Linear-dropout-linear; logs every step's loss in ``self.losses``; the train loader is chosen
    by the test."""

    def __init__(self, loader_factory, metrics: Optional[str] = None):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(DIM, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
        )
        self.loader_factory = loader_factory
        self.losses: list[list[Any]] = []
        self.metrics = metrics

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self.net(x), y)
        self.losses.append([self.global_step + 1, loss.item()])
        if self.metrics and self.global_rank == 0:
            with open(self.metrics, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "step": self.global_step + 1,
                            "epoch": self.current_epoch,
                            "loss": loss.item(),
                        }
                    )
                    + "\n"
                )
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):
        return self.loader_factory()


def seeder_loader(workers: int = 2):
    return seeder.DataLoader(NoisyDataset(), batch_size=BATCH, shuffle=True, num_workers=workers)


def run(
    seed: Optional[int],
    ckpt_dir: Optional[str] = None,
    ckpt_path: Optional[str] = None,
    max_steps: int = -1,
    epochs: int = 2,
    every: int = 1,
    loader_factory=seeder_loader,
    callbacks=None,
    metrics: Optional[str] = None,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    """One ``fit``: NVIDIA's recipe, the module, SeederCallback; returns losses and final
    weights."""
    # Lightning's launcher sets LOCAL_RANK and WORLD_SIZE in the processes it starts, but no RANK:
    # pass the rank.
    seeder.init(
        master_seed=seed,
        ngpus=trainer_kwargs.get("devices", 1),
        rank=int(os.environ.get("LOCAL_RANK", "0")),
    )
    seeder.reseed(0, 0)
    model = Net(loader_factory, metrics)
    cbs = [SeederCallback()] if callbacks is None else list(callbacks)
    if ckpt_dir is not None:
        cbs.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=ckpt_dir, filename="{step}", every_n_train_steps=every, save_top_k=-1
            )
        )
    trainer = pl.Trainer(
        max_epochs=epochs,
        max_steps=max_steps,
        callbacks=cbs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=ckpt_dir is not None,
        accelerator="cpu",
        deterministic=True,
        **trainer_kwargs,
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return {
        "losses": model.losses,
        "weights": {k: v.clone() for k, v in model.state_dict().items()},
        "trainer": trainer,
    }
