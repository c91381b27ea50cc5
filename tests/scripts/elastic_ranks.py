"""Child of tests/test_elastic_ranks.py (under torchrun, or in its process): an elastic
seeder.DataLoader, 2 epochs.

``DIR FULL_WORKERS RESUME_WORKERS [SAVED_WORLD ...]``: unless FULL_WORKERS is ``-``, a run with that
many loader workers trains 2 epochs uninterrupted, and after global step STOP of epoch 0 every rank
saves
``seeder.state_dict()`` to DIR/ckpt<world>_<rank>.pt and, with ``torch.distributed.checkpoint`` as
torchtitan-style loops do (seeder, model and optimizer in one ``dcp.save``), to DIR/dcp<world>, and
the model's and optimizer's states to DIR/weights<world>_<rank>.pt. Then, for each saved world
(``<world>d``: its DCP checkpoint, whose loaded model and optimizer states go to
DIR/loaded<world>dto<now>_<rank>.pt), a fresh seeder, model and loader (RESUME_WORKERS workers) load
that checkpoint (rank r's own file on the same world size, else rank 0's) and train what is left.
Every rank writes what it saw to DIR/<tag>_<rank>.pt: one row per step, ``(epoch, step, sample
tensors, the main process's draws after the step)``. The model is a linear layer trained on the
sample tensors, its gradients averaged over the ranks (DDP's way).
"""

from __future__ import annotations

import os
import random
import sys
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import seeder
from seeder.integrations.dcp import SeederStateful

N, GLOBAL_BATCH, STOP, EPOCHS, SEED = 44, 8, 2, 2, 1234


class Augmented(torch.utils.data.Dataset):
    """Each item draws from random, NumPy's global RNG, torch's CPU generator and a registered
    Generator."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        noise = [
            random.random(),
            float(np.random.rand()),
            float(torch.rand(())),
            float(self.rng.random()),
        ]
        return torch.tensor([float(i)] + noise, dtype=torch.float64)


class AppState:
    """The model and optimizer as one DCP ``Stateful``, through
    ``torch.distributed.checkpoint.state_dict``."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        self.model, self.opt = model, opt

    def state_dict(self) -> dict:
        model, opt = get_state_dict(self.model, self.opt)
        return {"model": model, "optim": opt}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(
            self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )


def weights(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list:
    """The model's parameters and the optimizer's momentum buffers, copied."""
    return [p.detach().clone() for p in model.parameters()] + [
        opt.state[p]["momentum_buffer"].clone() for p in model.parameters()
    ]


def setup(workers: int):
    s = seeder.Seeder()
    s.init(SEED)
    data = Augmented()
    s.register_generator(data.rng)
    world = dist.get_world_size()
    loader = seeder.ElasticDataLoader(
        data, batch_size=GLOBAL_BATCH // world, shuffle=True, num_workers=workers, seeder=s
    )
    model = torch.nn.Linear(4, 1, dtype=torch.float64)
    with torch.no_grad():  # the same weights on every rank, without drawing
        model.weight.copy_(torch.linspace(-1, 1, 4, dtype=torch.float64))
        model.bias.zero_()
    return s, loader, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(s, loader, model, opt, rows, first_epoch: int, stop=None) -> None:
    """Train from ``first_epoch``; ``stop(epoch, step)`` is called after each step."""
    for epoch in range(first_epoch, EPOCHS):
        s.reseed(1, epoch)  # skipped for the epoch a loaded state stands in
        start = loader.state_dict()["position"] // GLOBAL_BATCH
        for step, batch in enumerate(loader, start):
            model(batch[:, 1:]).pow(2).mean().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            opt.step()
            opt.zero_grad()
            rows.append(
                (
                    epoch,
                    step,
                    batch,
                    torch.tensor([random.random(), float(np.random.rand())]),
                    torch.rand(2),
                )
            )
            if stop is not None:
                stop(epoch, step)


def main(out: str, full_workers: Optional[int], workers: int, saved_worlds) -> None:
    """The runs of one process (its process group started from the environment, as torchrun sets
    it)."""
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if full_workers is not None:
        s, loader, model, opt = setup(full_workers)
        rows: list = []

        def stop(epoch: int, step: int) -> None:
            if (epoch, step) == (0, STOP):
                torch.save(s.state_dict(), os.path.join(out, f"ckpt{world}_{rank}.pt"))
                dcp.save(
                    {"seeder": SeederStateful(s), "app": AppState(model, opt)},
                    checkpoint_id=os.path.join(out, f"dcp{world}"),
                )
                torch.save(weights(model, opt), os.path.join(out, f"weights{world}_{rank}.pt"))

        train(s, loader, model, opt, rows, 0, stop)
        torch.save(rows, os.path.join(out, f"full{world}_{rank}.pt"))
    for tag in saved_worlds:
        s, loader, model, opt = setup(workers)
        saved = int(tag.rstrip("d"))
        if tag.endswith("d"):  # torch.distributed.checkpoint, from every rank
            dcp.load(
                {"seeder": SeederStateful(s), "app": AppState(model, opt)},
                checkpoint_id=os.path.join(out, f"dcp{saved}"),
            )
            torch.save(weights(model, opt), os.path.join(out, f"loaded{tag}to{world}_{rank}.pt"))
        else:
            state = torch.load(
                os.path.join(out, f"ckpt{saved}_{rank if saved == world else 0}.pt"),
                weights_only=True,
            )
            s.load_state_dict(state)
        rows = []
        train(s, loader, model, opt, rows, s.last_reseed[1])
        torch.save(rows, os.path.join(out, f"resume{tag}to{world}_{rank}.pt"))
    dist.barrier()


if __name__ == "__main__":
    main(
        sys.argv[1],
        None if sys.argv[2] == "-" else int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4:],
    )
