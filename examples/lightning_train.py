#!/usr/bin/env python
"""A small Lightning training run with seeder: reproducible, and resumed bit for bit from
Lightning's own checkpoints.

CPU only; one process, or ``--devices 2`` (``strategy="ddp"`` on gloo; Lightning starts the second
process)::

    python examples/lightning_train.py --seed 42 --epochs 3 --ckpt-dir ckpt --ckpt-every-steps 5
    python examples/lightning_train.py --seed 42 --epochs 3 --ckpt-dir ckpt \\
        --ckpt-path ckpt/last.ckpt
    seeder verify -- python examples/lightning_train.py

What it shows: NVIDIA's recipe (``seeder.init``, ``reseed(0, 0)`` before the model is
built), ``seeder.DataLoader`` returned by ``train_dataloader()``, the dataset and model of
``examples/train.py`` (augmentation drawn from ``random``, NumPy, torch and registered
generators, in 2 DataLoader workers; dropout), an LR scheduler, ``SeederCallback`` in the
Trainer, Lightning's ``ModelCheckpoint(every_n_train_steps=...)`` and
``fit(ckpt_path=resume_path(args.ckpt_path))``: the checkpoint the user names, or the one
``seeder verify`` resumes a run from. Nothing else is there for verify: seeder records the
steps and stops and resumes the runs verify asks for.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F

import seeder
from seeder.integrations.lightning import SeederCallback, resume_path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import SyntheticDataset, build_model  # noqa: E402  the plain-loop example's data and model

CKPT_NAME = "last"


class Classifier(pl.LightningModule):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.args = args
        self.net = build_model("torch")  # dropout inside
        self.dataset = SyntheticDataset(args.samples)
        for pert in (
            self.dataset.perturbations
        ):  # the dataset's generators, registered as NVIDIA's seeder does
            seeder.register_generator(pert.reseed_rng)

    def train_dataloader(self):
        # Built here, after Lightning started the process group: the sampler shards by global rank.
        return seeder.DataLoader(
            self.dataset,
            batch_size=self.args.batch_size,
            shuffle=True,
            num_workers=self.args.workers,
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        smoothing = float(np.random.uniform(0.0, 0.1))  # main-process randomness too
        loss = F.cross_entropy(self.net(x), y, label_smoothing=smoothing)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(
            self.parameters(), lr=self.args.lr, momentum=0.9, weight_decay=1e-4
        )
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)]


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seed", type=int, default=None, help="master seed; default None draws one (printed)"
    )
    p.add_argument("--epochs", type=int, default=3, help="epochs of the full run")
    p.add_argument(
        "--ckpt-dir",
        default=None,
        help="checkpoint directory (DIR/last.ckpt); default: no checkpoints",
    )
    p.add_argument(
        "--ckpt-every-steps",
        type=int,
        default=0,
        help="checkpoint every K steps (0: at epoch ends)",
    )
    p.add_argument("--ckpt-path", default=None, help="a Lightning checkpoint to resume from")
    p.add_argument(
        "--devices", type=int, default=1, help="processes (strategy='ddp' on CPU when > 1)"
    )
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=512, help="dataset size")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "samples", "devices"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    torch.set_num_threads(1)

    # NVIDIA's recipe: init (every process: Lightning reruns this script for ranks >= 1), reseed(0,
    # 0), then the model. Lightning's launcher sets LOCAL_RANK and WORLD_SIZE in the processes it
    # starts, but no RANK: give the rank.
    seeder.init(
        master_seed=args.seed, ngpus=args.devices, rank=int(os.environ.get("LOCAL_RANK", "0"))
    )
    seeder.reseed(0, 0)
    model = Classifier(args)

    callbacks: list[Any] = [SeederCallback()]
    if args.ckpt_dir:
        steps_per_epoch = math.ceil(math.ceil(args.samples / args.devices) / args.batch_size)
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=args.ckpt_dir,
                filename=CKPT_NAME,
                save_top_k=1,
                every_n_train_steps=args.ckpt_every_steps or steps_per_epoch,
                enable_version_counter=False,
            )
        )
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(args.ckpt_dir),
        deterministic=True,
    )
    trainer.fit(
        model, ckpt_path=resume_path(args.ckpt_path)
    )  # the user's checkpoint, or the one seeder verify resumes
    if trainer.global_rank == 0:
        print(
            f"trained {trainer.global_step} steps; digest "
            f"{seeder.digest(model, trainer.optimizers[0])}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
