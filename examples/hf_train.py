#!/usr/bin/env python
"""A transformers.Trainer run that resumes bit for bit from any step, with seeder's SeederTrainer.

::

    python examples/hf_train.py --seed 42 --epochs 3 --save-steps 5
    python examples/hf_train.py --seed 42 --epochs 3 --save-steps 5 --resume  # last checkpoint
    seeder verify -- python examples/hf_train.py
    torchrun --nproc-per-node 2 examples/hf_train.py --seed 42

A tiny classifier returning ``{"loss": ...}``, items augmented with ``random``, NumPy and
torch in 2 DataLoader workers, dropout. Checkpoints are the Trainer's own folders
(``checkpoint-<step>`` in ``--output-dir``), each with ``seeder_state_<rank>.pt``. Nothing
here is there for ``seeder verify``: seeder records the steps, and ``SeederTrainer`` stops
and resumes the runs verify asks for.
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np
import torch
from transformers import TrainingArguments

import seeder
from seeder.integrations.transformers import SeederTrainer


class Augmented(torch.utils.data.Dataset):
    """A fixed task (independent of --seed) whose items are augmented with random, NumPy and
    torch."""

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
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, 64),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(64, classes),
        )

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits, labels)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seed", type=int, default=None, help="master seed; default None draws one (printed)"
    )
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument(
        "--output-dir", default="hf_train_out", help="the Trainer's output_dir (its checkpoints)"
    )
    p.add_argument("--save-steps", type=int, default=0, help="a checkpoint every K steps (0: none)")
    p.add_argument(
        "--resume", action="store_true", help="continue from the last checkpoint in --output-dir"
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    args = TrainingArguments(
        output_dir=a.output_dir,
        per_device_train_batch_size=a.batch_size,
        num_train_epochs=a.epochs,
        learning_rate=0.05,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        save_strategy="steps" if a.save_steps else "no",
        save_steps=a.save_steps or 500,
        dataloader_num_workers=a.workers,
        ddp_find_unused_parameters=False,
        seed=0 if a.seed is None else a.seed,
        log_level="warning",
    )
    seeder.init(
        master_seed=a.seed
    )  # None: drawn and printed; after TrainingArguments, which starts the process group
    seeder.reseed(0, 0)  # initial weights (under DDP the Trainer broadcasts rank 0's)
    model = Classifier()
    trainer = SeederTrainer(model=model, args=args, train_dataset=Augmented(a.samples))
    trainer.train(resume_from_checkpoint=True if a.resume else None)
    if trainer.is_world_process_zero():
        print(
            f"trained {trainer.state.global_step} steps; digest {seeder.digest(model)}", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
