#!/usr/bin/env python
"""How long resuming into the middle of an epoch takes: SeederTrainer vs the Trainer's own resume.

Both runs resume from a checkpoint taken N batches into an epoch of a 20k-item dataset and
train one more step; the time is from ``train(resume_from_checkpoint=...)`` to the end of
that first step (measured in ``on_step_end``). The Trainer replays the epoch's sampler up to
the checkpoint (``skip_first_batches``); SeederTrainer's loader starts at the saved batch.

    PYTHONPATH=. python benchmarks/bench_hf_resume.py [--items 20000] [--batch 64] [--workers 0]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import seeder
from seeder.integrations.transformers import SeederTrainer


class Items(torch.utils.data.Dataset):
    """Cheap items, so that what the resume costs is the data path, not the model."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return {"x": torch.full((4,), float(i % 97)), "labels": torch.tensor(i % 2)}


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.cross_entropy(self.lin(x), labels)}


class StopAt(TrainerCallback):
    def __init__(self, step: int, save: bool):
        self.step, self.save, self.t = step, save, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            self.t = time.perf_counter()
            control.should_save = self.save
            control.should_training_stop = True


def resume_seconds(cls, items: int, batch: int, workers: int, at: int) -> float:
    out = tempfile.mkdtemp()

    def trainer(stop: StopAt):
        kw = {} if cls is Trainer else {"seeder": seeder.Seeder()}
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch,
            num_train_epochs=1,
            report_to=[],
            disable_tqdm=True,
            use_cpu=True,
            save_strategy="no",
            dataloader_num_workers=workers,
            log_level="error",
            logging_strategy="no",
        )
        return cls(model=Net(), args=args, train_dataset=Items(items), callbacks=[stop], **kw)

    # Reach the checkpoint cheaply: a run of `at` steps is what both resumes start from.
    trainer(StopAt(at, save=True)).train()
    stop = StopAt(at + 1, save=False)
    t = trainer(stop)
    start = time.perf_counter()
    t.train(resume_from_checkpoint=f"{out}/checkpoint-{at}")
    return stop.t - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=20000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=0)
    a = p.parse_args()
    logging.disable(logging.WARNING)
    if a.items // a.batch < 2:
        raise SystemExit(
            f"--items {a.items} gives {a.items // a.batch} batch(es) of {a.batch}: the resume "
            f"needs 2 or more"
        )
    at = max(1, a.items // a.batch - 10)  # near the end of the epoch
    hf = resume_seconds(Trainer, a.items, a.batch, a.workers, at)
    sd = resume_seconds(SeederTrainer, a.items, a.batch, a.workers, at)
    print(
        f"resume at batch {at} of {a.items // a.batch} ({a.items} items, batch {a.batch}, "
        f"{a.workers} workers), train() to the end of the first step:"
    )
    print(f"  Trainer (skip_first_batches replay): {hf * 1e3:9.1f} ms")
    print(f"  SeederTrainer (O(1) position):       {sd * 1e3:9.1f} ms")
    print(f"  RATIO SeederTrainer / Trainer (ours / theirs): {sd / hf:.3f}")


if __name__ == "__main__":
    main()
