#!/usr/bin/env python
"""A small training script that uses seeder as NVIDIA's seeder documents it, and resumes bit for
bit.

Copy it as the model for your own script. CPU only; one process or
``torchrun --nproc-per-node N`` (DDP on gloo)::

    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt
    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --resume  # from ckpt/last.pt
    torchrun --nproc-per-node 2 examples/train.py --seed 42 --ckpt-dir ckpt --resume
    seeder verify -- python examples/train.py

NVIDIA's recipe: ``--seed`` (default None: seeder draws and logs one), ``seeder.init``,
``reseed(0, 0)`` before the model is built, ``reseed(1, epoch)`` every epoch, the
dataset's generators registered like ``Perturbation.reseed_rng`` in NVIDIA seeder's README.
On top of it, a ``seeder.Checkpoint``: model, optimizer, scheduler and every rank's seeder
state in one file, written atomically at each epoch's last step (or every
``--ckpt-every-steps`` steps), and ``--resume`` from any of them. The last stdout line
gives the steps trained and the digest of weights and optimizer state. Nothing here is
there for ``seeder verify``: seeder records the steps, and ``seeder.Checkpoint`` stops and
resumes the runs verify asks for.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import Dataset

import seeder

CKPT_NAME = "last.pt"
DALI_IMAGE, DALI_CROP, DALI_CHANNELS, DALI_CLASSES = (
    12,
    8,
    3,
    10,
)  # --loader dali: images and classes


# ----------------------------------------------------------------------------------------- data
class Perturbation:
    """NVIDIA seeder's example generator: a random gain drawn from its own ``random.Random``.

    ``reseed_rng`` is what NVIDIA's seeder registers. ``state_dict``/``load_state_dict``
    let a checkpoint carry this generator's position too (a mid-epoch resume needs it).
    """

    def __init__(self, low: float, high: float):
        self.low, self.high = low, high
        self.rng = random.Random()

    def reseed_rng(self, seed: int) -> None:
        self.rng.seed(seed)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.rng.uniform(self.low, self.high)

    def state_dict(self) -> dict[str, Any]:
        version, words, gauss = self.rng.getstate()
        return {"version": version, "words": words, "gauss": gauss}

    def check_state_dict(self, state: Any) -> None:
        if (
            not isinstance(state, dict)
            or set(state) != {"version", "words", "gauss"}
            or len(state["words"]) != 625
        ):
            raise seeder.StateError(
                "Perturbation state must be {'version', 'words' (625 ints), 'gauss'}"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate((state["version"], tuple(state["words"]), state["gauss"]))


class SyntheticDataset(Dataset):
    """A fixed classification task (the data do not depend on ``--seed``) with random
    augmentation."""

    def __init__(self, n: int, dim: int = 32, classes: int = 8):
        g = torch.Generator().manual_seed(20240601)
        self.x = torch.randn(n, dim, generator=g)
        teacher = torch.randn(dim, classes, generator=g)
        self.y = (self.x @ teacher + 0.5 * torch.randn(n, classes, generator=g)).argmax(1)
        self.perturbations = [Perturbation(0.8, 1.25), Perturbation(0.9, 1.1)]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i].clone()
        x = torch.roll(x, random.randint(-1, 1))  # Python random
        x = x * float(np.random.uniform(0.9, 1.1))  # NumPy's global RNG
        x = x + 0.1 * torch.randn(x.shape)  # torch's global RNG
        for pert in self.perturbations:  # the dataset's generators
            x = pert(x)
        return x, self.y[i]


def make_loader(args: argparse.Namespace) -> Any:
    """The training loader. Call after ``seeder.init``."""
    if args.loader == "dali":  # the pipeline's seed comes from the seeder
        from dali_loader import DaliLoader

        return DaliLoader(
            batch_size=args.batch_size,
            dataset_size=args.samples,
            image_size=DALI_IMAGE,
            crop=DALI_CROP,
            channels=DALI_CHANNELS,
            num_classes=DALI_CLASSES,
        )
    dataset = SyntheticDataset(args.samples)
    for pert in dataset.perturbations:
        seeder.register_generator(pert.reseed_rng)
    # Shuffled and sharded by rank, follows seeder.reseed(1, epoch), worker randomness a pure
    # function of (seed, epoch, batch), and its position travels in seeder.state_dict(): a resume
    # continues from any step.
    return seeder.DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers,
    )


def build_model(loader: str) -> torch.nn.Module:
    dim, classes = (DALI_CHANNELS * DALI_CROP**2, DALI_CLASSES) if loader == "dali" else (32, 8)
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 128),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 64),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(64, classes),
    )


def train_step(
    net: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> float:
    x, y = x.flatten(1), y.flatten()
    smoothing = float(np.random.uniform(0.0, 0.1))  # main-process randomness: NumPy ...
    if random.random() < 0.5:  # ... and Python random
        x = x + 0.05 * torch.randn_like(x)
    loss = F.cross_entropy(net(x), y, label_smoothing=smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


# ------------------------------------------------------------------------------------------ main
def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="A small training run seeded by seeder, resumable bit for bit."
    )
    p.add_argument(
        "--seed", type=int, default=None, help="master seed; default None draws one (logged)"
    )
    p.add_argument("--epochs", type=int, default=4, help="epochs of the full run")
    p.add_argument("--ckpt-dir", default="ckpt", help="checkpoint directory (DIR/last.pt)")
    p.add_argument("--resume", action="store_true", help="continue from DIR/last.pt if it exists")
    p.add_argument(
        "--ckpt-every-steps",
        type=int,
        default=0,
        help="checkpoint every K global steps (0: at epoch ends)",
    )
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=2048, help="dataset size")
    p.add_argument(
        "--loader",
        choices=["torch", "dali"],
        default="torch",
        help="torch: seeder.DataLoader; dali: a DALI CPU pipeline (needs seeder[dali])",
    )
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.ckpt_every_steps < 0:
        p.error("--ckpt-every-steps must be >= 0")
    if args.persistent_workers and args.workers == 0:
        p.error("--persistent-workers needs --workers >= 1")
    return args


def init_distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank); under torchrun, a gloo process group."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Keys of an earlier torchrun attempt (--max-restarts) stay in the launcher's store; a
        # prefix per attempt keeps gloo from connecting to the addresses of processes that died.
        store, rank, world = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(
            f"train-attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store
        )
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
        return rank, world, int(os.environ.get("LOCAL_RANK", "0"))
    return 0, 1, 0


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rank, world, local_rank = init_distributed()

    # NVIDIA's recipe: init, reseed(0, 0) before the model is built.
    seeder.init(master_seed=args.seed, ngpus=world, local_rank=local_rank)
    seeder.reseed(0, 0)
    model = build_model(args.loader)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)
    loader = make_loader(args)

    # One file (rank 0 writes it, with every rank's seeder state), saved by ckpt.step() at each
    # epoch's last step, before the scheduler steps: a resumed run finishes that epoch's end itself.
    ckpt = seeder.Checkpoint(
        os.path.join(args.ckpt_dir, CKPT_NAME),
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        every_steps=args.ckpt_every_steps or len(loader),
    )
    start_epoch = ckpt.resume(
        args.resume and os.path.isfile(ckpt.path)
    )  # the epoch the checkpoint is in
    if args.loader == "dali":
        loader.restore()  # a DALI pipeline takes a loaded position only when it is built
    for epoch in range(start_epoch, args.epochs):
        seeder.reseed(
            1, epoch
        )  # skipped right after a resume: the loaded state continues the epoch
        net.train()
        losses = []
        for x, y in loader:
            losses.append(train_step(net, optimizer, x, y))
            ckpt.step()  # after each optimizer step
        scheduler.step()
        if rank == 0 and losses:
            logging.getLogger("train").info(
                "epoch %d: %d steps, up to step %d; mean loss %.4f",
                epoch,
                len(losses),
                ckpt.steps,
                sum(losses) / len(losses),
            )

    digest = seeder.digest(model, optimizer)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:  # one line: torchrun interleaves the ranks' stdout
        print(f"trained {ckpt.steps} steps; digest {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
