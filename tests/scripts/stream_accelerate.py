"""Child of tests/test_accelerate_streams.py (in-process, or under torchrun): a stream, accelerated.

``DIR WORKERS TOKEN...``; each token in turn, on ``W`` processes (1 without a launcher), with
``WORKERS`` loader workers:

* ``full``: train EPOCHS epochs of a ``seeder.IterableDataLoader`` over :class:`Stream`
  uninterrupted; after global step STOP (inside epoch 0) ``accelerator.save_state(DIR/ckpt<W>)``.
  Rows to DIR/full<W>_<rank>.pt.
* ``resume``: a fresh accelerator, model, optimizer and loader;
  ``accelerator.load_state(DIR/ckpt<W>)``, then train what is left. Rows to DIR/resume<W>_<rank>.pt.

A row is ``(epoch, step, item indices, batch, loss, end_of_dataloader)``: the batch as the training
loop got it (augmented from random, NumPy and torch per item), the loss after DDP's all-reduce of
the gradients (2 processes), and accelerate's gradient-state flag for the epoch's last batch.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

import seeder
from seeder.integrations.accelerate import SeederAccelerator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import Tiny  # noqa: E402

N, BATCH, EPOCHS, STOP, SEED = 48, 4, 2, 3, 42  # 1 process: 12 steps an epoch; 2: 6 on each rank


class Stream(torch.utils.data.IterableDataset):
    """Fixed features, each item augmented with ``random``, NumPy's and torch's global RNGs."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(N, 8, generator=g)

    def __iter__(self):
        share = seeder.data.stream_share()
        for i in range(share.index, N, share.count):
            x = self.x[i] * float(np.random.uniform(0.9, 1.1)) + 0.1 * torch.randn(8)
            yield {
                "x": torch.roll(x, random.randint(-1, 1)),
                "labels": int(self.x[i].sum() > 0),
                "index": i,
            }


def setup(workers: int):
    """Accelerator first (it starts the process group), then the seeder, model and loader."""
    s = seeder.Seeder()
    acc = SeederAccelerator(cpu=True, seeder=s)
    s.init(SEED)
    s.reseed(0, 0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = seeder.IterableDataLoader(Stream(), batch_size=BATCH, num_workers=workers, seeder=s)
    model, opt, prepared = acc.prepare(model, opt, loader)
    return acc, s, model, opt, loader, prepared


def train(acc, s, model, opt, loader, prepared, first_epoch: int, save=None) -> list:
    rows = []
    step = 0
    for epoch in range(first_epoch, EPOCHS):
        s.reseed(1, epoch)  # skipped for the epoch a loaded state stands in
        for step, batch in enumerate(prepared, loader.batches_done):
            loss = model(batch["x"], batch["labels"])["loss"]
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            last = acc.gradient_state.end_of_dataloader
            rows.append((epoch, step, batch["index"], batch["x"], loss.detach(), last))
            if save is not None and (epoch, step) == (0, STOP):
                acc.save_state(save)
    return rows


def main(out: str, workers: int, tokens) -> None:
    for token in tokens:
        acc, s, model, opt, loader, prepared = setup(workers)
        world, rank = acc.num_processes, acc.process_index
        ckpt = os.path.join(out, f"ckpt{world}")
        if token == "full":
            rows = train(acc, s, model, opt, loader, prepared, 0, save=ckpt)
        else:
            acc.load_state(ckpt)
            rows = train(acc, s, model, opt, loader, prepared, s.last_reseed[1])
        torch.save((rows, seeder.digest(model)), os.path.join(out, f"{token}{world}_{rank}.pt"))
        acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
