#!/usr/bin/env python
"""A transformers.Trainer run that resumes bit for bit from any step, with seeder's SeederTrainer.

Speaks ``seeder verify``'s contract (the flags of examples/train.py)::

    python examples/hf_train.py --seed 42 --epochs 3 --ckpt-dir ck --metrics m.jsonl
    python examples/hf_train.py --seed 42 --epochs 3 --ckpt-dir ck --stop-after-steps 7   # stop mid-epoch ...
    python examples/hf_train.py --seed 42 --epochs 3 --ckpt-dir ck --resume               # ... and resume
    seeder verify -- python examples/hf_train.py
    torchrun --nproc-per-node 2 examples/hf_train.py --seed 42 --ckpt-dir ck

A tiny classifier returning ``{"loss": ...}``, items augmented with ``random``, NumPy and
torch in 2 DataLoader workers, dropout, per-step losses as JSON lines, the final
``DIGEST <hex>`` line. Checkpoints: the Trainer's folders (``checkpoint-<step>``), each
with ``seeder_state_<rank>.pt``, at every epoch end and every ``--ckpt-every-steps``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys

import numpy as np
import torch
from transformers import TrainerCallback, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

import seeder
from seeder.integrations.transformers import SeederTrainer


class Augmented(torch.utils.data.Dataset):
    """A fixed task (independent of --seed) whose items are augmented with random, NumPy and torch."""

    def __init__(self, n: int, dim: int = 16):
        g = torch.Generator().manual_seed(20240601)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ torch.randn(dim, 4, generator=g)).argmax(1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        x = torch.roll(self.x[i], random.randint(-1, 1)) * float(np.random.uniform(0.9, 1.1))
        return {"x": x + 0.1 * torch.randn(x.shape), "labels": self.y[i]}


class Classifier(torch.nn.Module):
    def __init__(self, dim: int = 16, classes: int = 4):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                       torch.nn.Linear(64, classes))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits, labels)}


class Contract(TrainerCallback):
    """Per-step metrics (rank 0), checkpoints at epoch ends / every K steps, the stop points."""

    def __init__(self, args: argparse.Namespace, steps_per_epoch: int, rank: int):
        self.a, self.steps_per_epoch, self.rank, self.stopping = args, steps_per_epoch, rank, False
        self.file = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.rank == 0 and self.a.metrics and logs and "loss" in logs:
            if self.file is None:
                self.file = open(self.a.metrics, "a")
            epoch = (state.global_step - 1) // self.steps_per_epoch
            self.file.write(json.dumps({"step": state.global_step, "epoch": epoch, "loss": logs["loss"]}) + "\n")
            self.file.flush()

    def on_step_end(self, args, state, control, **kwargs):
        step, a = state.global_step, self.a
        if a.ckpt_every_steps and step % a.ckpt_every_steps == 0:
            control.should_save = True
        if step % self.steps_per_epoch == 0:
            control.should_save = True  # epoch end
            if a.stop_after_epochs is not None and step // self.steps_per_epoch >= a.stop_after_epochs:
                control.should_training_stop = self.stopping = True
        if a.stop_after_steps is not None and step >= a.stop_after_steps:
            control.should_save = control.should_training_stop = self.stopping = True

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = False  # saved by on_step_end already (the Trainer calls this on a stop too)


def truncate_metrics(path: str, step: int) -> None:
    """On resume: drop the records the resumed run writes again."""
    if not path or not os.path.exists(path):
        return
    keep = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if "loss" in rec and rec["step"] <= step:
                keep.append(json.dumps(rec) + "\n")
    with open(path, "w") as f:
        f.writelines(keep)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop-after-epochs", type=int, default=None)
    p.add_argument("--stop-after-steps", type=int, default=None)
    p.add_argument("--ckpt-every-steps", type=int, default=0)
    p.add_argument("--metrics", default=os.environ.get("SEEDER_METRICS"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    out = a.ckpt_dir or "hf_train_out"
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=a.batch_size, num_train_epochs=a.epochs,
                             learning_rate=0.05, logging_steps=1, save_strategy="no", report_to=[], disable_tqdm=True,
                             use_cpu=True, dataloader_num_workers=a.workers, ddp_find_unused_parameters=False,
                             seed=0 if a.seed is None else a.seed, log_level="warning")
    seeder.init(master_seed=a.seed)  # None: drawn and logged; after TrainingArguments, which starts the process group
    a.seed = seeder.get_master_seed()
    seeder.reseed(0, 0)  # initial weights (under DDP the Trainer broadcasts rank 0's)
    model = Classifier()
    dataset = Augmented(a.samples)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_rank = -(-a.samples // world)
    contract = Contract(a, -(-per_rank // a.batch_size), int(os.environ.get("RANK", "0")))
    trainer = SeederTrainer(model=model, args=args, train_dataset=dataset, callbacks=[contract])
    last = get_last_checkpoint(out) if a.resume and os.path.isdir(out) else None
    if a.resume and contract.rank == 0:
        truncate_metrics(a.metrics, int(last.rsplit("-", 1)[1]) if last else 0)
    trainer.train(resume_from_checkpoint=last)
    digest = seeder.digest(model)
    if contract.rank == 0:
        if a.metrics:
            with open(a.metrics, "a") as f:
                f.write(json.dumps({"digest": digest, "step": trainer.state.global_step}) + "\n")
        print(f"DIGEST {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
