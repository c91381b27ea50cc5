"""Child of tests/test_elastic_ranks.py, run under torchrun: an elastic seeder.DataLoader over 2 epochs.

``DIR WORKERS full|resume [SAVED_WORLD ...]``: ``full`` trains 2 epochs uninterrupted, and after global step
STOP of epoch 0 every rank saves ``seeder.state_dict()`` to DIR/ckpt<world>_<rank>.pt and, with
``torch.distributed.checkpoint``, to DIR/dcp<world>. Then, for each saved world (``<world>d``: its DCP
checkpoint), a fresh seeder and loader load that checkpoint (rank r's own file on the same world size,
else rank 0's) and train what is left. Every rank writes what it saw to DIR/<tag>_<rank>.pt: one row per step,
``(epoch, step, sample tensors, the main process's draws after the step)``.
"""
from __future__ import annotations

import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import seeder
from seeder.integrations.dcp import SeederStateful

N, GLOBAL_BATCH, STOP, EPOCHS = 44, 8, 2, 2


class Augmented(torch.utils.data.Dataset):
    """Each item draws from random, NumPy's global RNG, torch's CPU generator and a registered Generator."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = [random.random(), float(np.random.rand()), float(torch.rand(())), float(self.rng.random())]
        return torch.tensor([float(i)] + noise, dtype=torch.float64)


def setup(workers: int):
    s = seeder.Seeder()
    s.init(1234)
    data = Augmented()
    s.register_generator(data.rng)
    world = dist.get_world_size()
    loader = seeder.DataLoader(data, batch_size=GLOBAL_BATCH // world, shuffle=True, num_workers=workers, elastic=True,
                               seeder=s)
    return s, loader


def train(s, loader, rows, first_epoch: int, stop=None) -> None:
    """Train from ``first_epoch``; ``stop(epoch, step)`` is called after each step."""
    for epoch in range(first_epoch, EPOCHS):
        s.reseed(1, epoch)  # skipped for the epoch a loaded state stands in
        start = loader.state_dict()["samples_done"] // GLOBAL_BATCH
        for step, batch in enumerate(loader, start):
            rows.append((epoch, step, batch, torch.tensor([random.random(), float(np.random.rand())]), torch.rand(2)))
            if stop is not None:
                stop(epoch, step)


def main(out: str, workers: int, full: bool, saved_worlds) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if full:
        s, loader = setup(workers)
        rows: list = []

        def stop(epoch: int, step: int) -> None:
            if (epoch, step) == (0, STOP):
                torch.save(s.state_dict(), os.path.join(out, f"ckpt{world}_{rank}.pt"))
                dcp.save({"seeder": SeederStateful(s)}, checkpoint_id=os.path.join(out, f"dcp{world}"))

        train(s, loader, rows, 0, stop)
        torch.save(rows, os.path.join(out, f"full{world}_{rank}.pt"))
    for tag in saved_worlds:
        s, loader = setup(workers)
        saved = int(tag.rstrip("d"))
        if tag.endswith("d"):  # torch.distributed.checkpoint, from every rank
            dcp.load({"seeder": SeederStateful(s)}, checkpoint_id=os.path.join(out, f"dcp{saved}"))
        else:
            state = torch.load(os.path.join(out, f"ckpt{saved}_{rank if saved == world else 0}.pt"), weights_only=True)
            s.load_state_dict(state)
        rows = []
        train(s, loader, rows, s.last_reseed[1])
        torch.save(rows, os.path.join(out, f"resume{tag}to{world}_{rank}.pt"))
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "full", sys.argv[4:])
