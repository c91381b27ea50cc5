#!/usr/bin/env python
"""A small Lightning training run with seeder: reproducible, and resumed bit for bit from Lightning's own checkpoints.

CPU only; one process, or ``--devices 2`` (``strategy="ddp"`` on gloo; Lightning starts the second process)::

    python examples/lightning_train.py --seed 42 --epochs 3 --ckpt-dir ckpt --metrics m.jsonl
    python examples/lightning_train.py --seed 42 --epochs 3 --ckpt-dir ckpt --stop-after-steps 10   # stop ...
    python examples/lightning_train.py --seed 42 --epochs 3 --ckpt-dir ckpt --resume                # ... resume
    seeder verify -- python examples/lightning_train.py

What it shows: NVIDIA's recipe (``seeder.init``, ``reseed(0, 0)`` before the model is
built), ``seeder.DataLoader`` returned by ``train_dataloader()``, the dataset, model and metrics of
``examples/train.py`` (augmentation drawn from ``random``, NumPy, torch and registered
generators, in 2 DataLoader workers; dropout), an LR scheduler,
``SeederCallback`` in the Trainer, Lightning's ``ModelCheckpoint(every_n_train_steps=...)``
and ``fit(ckpt_path=...)``. It speaks ``seeder verify``'s contract: per-step metrics as
JSON lines, the final digest on the last stdout line (``DIGEST <hex>``).
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Any, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

import lightning.pytorch as pl
import seeder
from seeder.integrations.lightning import SeederCallback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import Metrics, SyntheticDataset, build_model  # noqa: E402  the plain-loop example's data, model, metrics

CKPT_NAME = "last"


class Classifier(pl.LightningModule):
    def __init__(self, args: argparse.Namespace):
        super().__init__()
        self.args = args
        self.net = build_model("torch")  # dropout inside
        self.dataset = SyntheticDataset(args.samples)
        for pert in self.dataset.perturbations:  # the dataset's generators, registered as NVIDIA's seeder does
            seeder.register_generator(pert.reseed_rng)

    def setup(self, stage: str) -> None:
        self.metrics = Metrics(self.args.metrics, self.global_rank)

    def train_dataloader(self):
        # Built here, after Lightning started the process group: the sampler shards by global rank.
        return seeder.DataLoader(self.dataset, batch_size=self.args.batch_size, shuffle=True,
                                 num_workers=self.args.workers)

    def training_step(self, batch, batch_idx):
        x, y = batch
        smoothing = float(np.random.uniform(0.0, 0.1))  # main-process randomness too
        loss = F.cross_entropy(self.net(x), y, label_smoothing=smoothing)
        self.metrics.write({"step": self.global_step + 1, "epoch": self.current_epoch, "loss": loss.item()})
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.args.lr, momentum=0.9, weight_decay=1e-4)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)]


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None, help="master seed; default None draws one (logged)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of the full run")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint directory (DIR/last.ckpt); default: no checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from DIR/last.ckpt if it exists")
    p.add_argument("--stop-after-epochs", type=int, default=None, help="exit after K epochs done and checkpointed")
    p.add_argument("--stop-after-steps", type=int, default=None, help="exit after global step S done and checkpointed")
    p.add_argument("--ckpt-every-steps", type=int, default=0, help="checkpoint every K steps (0: at epoch ends)")
    p.add_argument("--metrics", default=os.environ.get("SEEDER_METRICS"), help="append per-step metrics (JSON lines)")
    p.add_argument("--devices", type=int, default=1, help="processes (strategy='ddp' on CPU when > 1)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=512, help="dataset size")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "samples", "devices"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    torch.set_num_threads(1)
    first_process = "LOCAL_RANK" not in os.environ  # Lightning's launcher sets it for the processes it starts

    # NVIDIA's recipe: init (every process: Lightning reruns this script for ranks >= 1), reseed(0, 0), then the model.
    # Lightning's launcher sets LOCAL_RANK and WORLD_SIZE in the processes it starts, but no RANK: give the rank.
    seeder.init(master_seed=args.seed, ngpus=args.devices, rank=int(os.environ.get("LOCAL_RANK", "0")))
    args.seed = seeder.get_master_seed()
    seeder.reseed(0, 0)
    model = Classifier(args)

    steps_per_epoch = math.ceil(math.ceil(args.samples / args.devices) / args.batch_size)
    every = args.ckpt_every_steps or steps_per_epoch
    if args.stop_after_steps is not None:
        every = math.gcd(every, args.stop_after_steps)  # a checkpoint lands on the stop step
    if args.stop_after_epochs is not None:
        every = math.gcd(every, steps_per_epoch)
    callbacks: List[Any] = [SeederCallback()]
    ckpt_path = None
    if args.ckpt_dir:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=args.ckpt_dir, filename=CKPT_NAME, every_n_train_steps=every,
                                                      save_top_k=1, enable_version_counter=False))
        last = os.path.join(args.ckpt_dir, CKPT_NAME + ".ckpt")
        if args.resume and os.path.exists(last):
            ckpt_path = last
    if args.resume and first_process:
        step = torch.load(ckpt_path, map_location="cpu", weights_only=True)["global_step"] if ckpt_path else 0
        Metrics(args.metrics, 0).truncate_after(step)

    trainer = pl.Trainer(
        max_epochs=args.stop_after_epochs or args.epochs, max_steps=args.stop_after_steps or -1,
        accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
        callbacks=callbacks, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=bool(args.ckpt_dir), deterministic=True)
    trainer.fit(model, ckpt_path=ckpt_path)

    digest = seeder.digest(model, trainer.optimizers[0])
    model.metrics.write({"digest": digest, "step": trainer.global_step})
    if trainer.global_rank == 0:
        print(f"DIGEST {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
