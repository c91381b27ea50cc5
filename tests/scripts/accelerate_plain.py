"""Child of tests/test_accelerate_plain.py, in that process or under torchrun: a plain
``accelerate.Accelerator`` preparing a seeder.DataLoader (2 workers), beside SeederAccelerator.

``DIR TOKEN...``, each token in turn:

* ``plain`` / ``seeder``: train EPOCHS epochs uninterrupted with ``Accelerator`` /
  ``SeederAccelerator``; rows to DIR/<token><world>_<rank>.pt. After global step STOP of epoch 0,
  ``plain`` saves ``accelerator.save_state(DIR/ckpt<world>)`` with ``save_checkpoint_state`` beside
  it, and ``seeder.state_dict()`` in its own file DIR/own<world>_<rank>.pt.
* ``folder`` / ``own``: a fresh plain Accelerator, model and loader resume at STOP: the model and
  optimizer through ``accelerator.load_state``, the seeder state from the checkpoint folder
  (``load_checkpoint_state``) or from the own file (``seeder.load_state_dict``); rows of what is
  left to DIR/<token><world>_<rank>.pt.

A row is ``(epoch, step, sample indices, sample tensors, loss)``.
"""

from __future__ import annotations

import os
import sys

import torch
from accelerate import Accelerator

import seeder
from seeder.integrations.accelerate import (
    SeederAccelerator,
    load_checkpoint_state,
    save_checkpoint_state,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import Augmented, Tiny  # noqa: E402

N, GLOBAL_BATCH, STOP, EPOCHS, SEED, WORKERS = 32, 8, 2, 2, 42, 2


class Indexed(Augmented):
    """hf_common's augmented items (drawing from random, NumPy and torch), with their index."""

    def __init__(self) -> None:
        super().__init__(n=N)

    def __getitem__(self, i: int):
        return dict(super().__getitem__(i), index=i)


def setup(kind: str):
    """The accelerator first (it starts the process group), then the seeder, model and loader."""
    s = seeder.Seeder()
    acc = SeederAccelerator(cpu=True, seeder=s) if kind == "seeder" else Accelerator(cpu=True)
    s.init(SEED)
    s.reseed(0, 0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = seeder.DataLoader(
        Indexed(),
        batch_size=GLOBAL_BATCH // acc.num_processes,
        shuffle=True,
        num_workers=WORKERS,
        seeder=s,
    )
    model, opt, prepared = acc.prepare(model, opt, loader)
    return acc, s, model, opt, loader, prepared


def train(acc, s, model, opt, loader, prepared, first_epoch: int, stop=None) -> list:
    """Train from ``first_epoch``; ``stop(epoch, step)`` after each step."""
    rows: list = []
    for epoch in range(first_epoch, EPOCHS):
        s.reseed(1, epoch)  # skipped for the epoch a loaded state stands in
        for step, batch in enumerate(prepared, loader.batches_done):
            loss = model(batch["x"], batch["labels"])["loss"]
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            rows.append((epoch, step, batch["index"], batch["x"], loss.detach()))
            if stop is not None:
                stop(epoch, step)
    return rows


def main(out: str, tokens) -> None:
    for token in tokens:
        kind = token if token in ("plain", "seeder") else "plain"
        acc, s, model, opt, loader, prepared = setup(kind)
        world, rank = acc.num_processes, acc.process_index
        ckpt = os.path.join(out, f"ckpt{world}")
        own = os.path.join(out, f"own{world}_{rank}.pt")

        def stop(epoch: int, step: int, acc=acc, s=s, ckpt=ckpt, own=own) -> None:
            if (epoch, step) == (0, STOP):
                acc.save_state(ckpt)
                save_checkpoint_state(ckpt, s)
                torch.save({"seeder": s.state_dict()}, own)

        first = 0
        if token == "folder":
            acc.load_state(ckpt)
            load_checkpoint_state(ckpt, s)
            first = s.last_reseed[1]
        elif token == "own":
            acc.load_state(ckpt)
            s.load_state_dict(torch.load(own, weights_only=True)["seeder"])
            first = s.last_reseed[1]
        saving = stop if token == "plain" else None
        rows = train(acc, s, model, opt, loader, prepared, first, saving)
        torch.save(rows, os.path.join(out, f"{token}{world}_{rank}.pt"))
        acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
