"""Child of tests/test_accelerate_elastic.py, run under torchrun: SeederAccelerator with an elastic
seeder.DataLoader.

``DIR TOKEN...``, each token in turn:

* ``full``: train EPOCHS epochs uninterrupted (0 workers); after global step STOP of epoch 0 every
  rank calls ``accelerator.save_state(DIR/ckpt<world>)``. Rows go to DIR/full<world>_<rank>.pt.
* ``default``: a default-mode loader trains one step and saves DIR/plain<world> (a checkpoint that
  cannot move).
* ``<W>`` or ``<W>w<K>``: a fresh accelerator, model and loader (K loader workers, else 0) load
  DIR/ckpt<W> and train what is left; rows to DIR/resume<W>to<world>_<rank>.pt, the main process's
  draws right after ``load_state`` to DIR/probe<W>to<world>_<rank>.pt.
* ``plain<W>``: load DIR/plain<W>; the StateError's message goes to
  DIR/refused<W>to<world>_<rank>.txt.

A row is ``(epoch, step, sample indices, sample tensors, loss)``.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch

import seeder
from seeder._errors import StateError
from seeder.integrations.accelerate import SeederAccelerator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import Augmented, Tiny  # noqa: E402

N, GLOBAL_BATCH, STOP, EPOCHS, SEED = 32, 8, 1, 2, 42


class Indexed(Augmented):
    """hf_common's augmented items (drawing from random, NumPy and torch), with their index."""

    def __init__(self) -> None:
        super().__init__(n=N)

    def __getitem__(self, i: int):
        return dict(super().__getitem__(i), index=i)


def setup(elastic: bool = True, workers: int = 0):
    """Accelerator first (it starts the process group), then the seeder, the model and the
    loader."""
    s = seeder.Seeder()
    acc = SeederAccelerator(cpu=True, seeder=s)
    s.init(SEED)
    s.reseed(0, 0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    kind = seeder.ElasticDataLoader if elastic else seeder.DataLoader
    loader = kind(
        Indexed(),
        batch_size=GLOBAL_BATCH // acc.num_processes,
        shuffle=True,
        num_workers=workers,
        seeder=s,
    )
    model, opt, prepared = acc.prepare(model, opt, loader)
    return acc, s, model, opt, loader, prepared


def train(acc, s, model, opt, loader, prepared, first_epoch: int, stop=None, steps=None) -> list:
    """Train from ``first_epoch``; ``stop(epoch, step)`` after each step; at most ``steps``
    steps."""
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
            if steps is not None and len(rows) == steps:
                return rows
    return rows


def probe() -> torch.Tensor:
    """The main process's next draws from random, NumPy and torch (what dropout and the like would
    use)."""
    return torch.tensor(
        [random.random(), float(np.random.rand()), float(torch.rand(()))], dtype=torch.float64
    )


def main(out: str, tokens) -> None:
    for token in tokens:
        if token == "full":
            acc, s, model, opt, loader, prepared = setup()
            world, rank = acc.num_processes, acc.process_index

            def stop(epoch: int, step: int, acc=acc, world=world) -> None:
                if (epoch, step) == (0, STOP):
                    acc.save_state(os.path.join(out, f"ckpt{world}"))

            rows = train(acc, s, model, opt, loader, prepared, 0, stop)
            torch.save(rows, os.path.join(out, f"full{world}_{rank}.pt"))
        elif token == "default":
            acc, s, model, opt, loader, prepared = setup(elastic=False)
            world = acc.num_processes
            train(acc, s, model, opt, loader, prepared, 0, steps=1)
            acc.save_state(os.path.join(out, f"plain{world}"))
        elif token.startswith("plain"):
            acc, s, model, opt, loader, prepared = setup(elastic=False)
            world, rank = acc.num_processes, acc.process_index
            try:
                acc.load_state(os.path.join(out, token))
                message = "loaded"
            except StateError as exc:
                message = str(exc)
            with open(os.path.join(out, f"refused{token[5:]}to{world}_{rank}.txt"), "w") as f:
                f.write(message)
        else:
            saved, _, workers = token.partition("w")
            acc, s, model, opt, loader, prepared = setup(workers=int(workers or 0))
            world, rank = acc.num_processes, acc.process_index
            acc.load_state(os.path.join(out, f"ckpt{saved}"))
            torch.save(probe(), os.path.join(out, f"probe{saved}to{world}_{rank}.pt"))
            rows = train(acc, s, model, opt, loader, prepared, s.last_reseed[1])
            torch.save(rows, os.path.join(out, f"resume{saved}to{world}_{rank}.pt"))
        acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
