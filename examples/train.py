#!/usr/bin/env python
"""A small training script that uses seeder as NVIDIA's seeder documents it, and resumes bit for bit.

Copy it as the model for your own script. CPU only; one process or
``torchrun --nproc-per-node N`` (DDP on gloo)::

    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --metrics m.jsonl
    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --stop-after-steps 100   # stop ...
    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --resume                 # ... resume
    torchrun --nproc-per-node 2 examples/train.py --seed 42 --ckpt-dir ckpt --resume

NVIDIA's recipe: ``--seed`` (default None: seeder draws and logs one), ``seeder.init``,
``reseed(0, 0)`` before the model is built, ``reseed(1, epoch)`` every epoch, the
dataset's generators registered like ``Perturbation.reseed_rng`` in NVIDIA seeder's README. On top of it: an
atomic checkpoint (model, optimizer, scheduler, every rank's seeder state) at every
epoch end and every ``--ckpt-every-steps`` steps, and ``--resume``.

The flags ``--seed --epochs --ckpt-dir --resume --stop-after-epochs --stop-after-steps
--metrics`` are the contract ``seeder verify`` drives; ``--metrics`` gets one JSON line
per step and the final digest, and the last stdout line is ``DIGEST <hex>``.
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import logging
import os
import random
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import Dataset

import seeder

CKPT_NAME = "last.pt"
DALI_IMAGE, DALI_CROP, DALI_CHANNELS, DALI_CLASSES = 12, 8, 3, 10  # --loader dali: images and classes


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

    def state_dict(self) -> Dict[str, Any]:
        version, words, gauss = self.rng.getstate()
        return {"version": version, "words": words, "gauss": gauss}

    def check_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict) or set(state) != {"version", "words", "gauss"} or len(state["words"]) != 625:
            raise seeder.StateError("Perturbation state must be {'version', 'words' (625 ints), 'gauss'}")

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.rng.setstate((state["version"], tuple(state["words"]), state["gauss"]))


class SyntheticDataset(Dataset):
    """A fixed classification task (the data do not depend on ``--seed``) with random augmentation."""

    def __init__(self, n: int, dim: int = 32, classes: int = 8):
        g = torch.Generator().manual_seed(20240601)
        self.x = torch.randn(n, dim, generator=g)
        teacher = torch.randn(dim, classes, generator=g)
        self.y = (self.x @ teacher + 0.5 * torch.randn(n, classes, generator=g)).argmax(1)
        self.perturbations = [Perturbation(0.8, 1.25), Perturbation(0.9, 1.1)]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i].clone()
        x = torch.roll(x, random.randint(-1, 1))  # Python random
        x = x * float(np.random.uniform(0.9, 1.1))  # NumPy's global RNG
        x = x + 0.1 * torch.randn(x.shape)  # torch's global RNG
        for pert in self.perturbations:  # the dataset's generators
            x = pert(x)
        return x, self.y[i]


def make_loader(args: argparse.Namespace, saved_seeder_state: Optional[Dict[str, Any]]) -> Any:
    """The training loader. Call after ``seeder.init``."""
    if args.loader == "dali":  # the pipeline's seed comes from the seeder; a resume rebuilds it from its checkpoint
        from dali_loader import DaliLoader

        return DaliLoader(batch_size=args.batch_size, dataset_size=args.samples, image_size=DALI_IMAGE,
                          crop=DALI_CROP, channels=DALI_CHANNELS, num_classes=DALI_CLASSES,
                          state=saved_seeder_state)
    dataset = SyntheticDataset(args.samples)
    for pert in dataset.perturbations:
        seeder.register_generator(pert.reseed_rng)
    # Shuffled and sharded by rank, follows seeder.reseed(1, epoch), worker randomness a pure function of
    # (seed, epoch, batch), and its position travels in seeder.state_dict(): a resume continues from any step.
    return seeder.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                             persistent_workers=args.persistent_workers)


def build_model(loader: str) -> torch.nn.Module:
    dim, classes = (DALI_CHANNELS * DALI_CROP**2, DALI_CLASSES) if loader == "dali" else (32, 8)
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(64, classes))


def train_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    x, y = x.flatten(1), y.flatten()
    smoothing = float(np.random.uniform(0.0, 0.1))  # main-process randomness: NumPy ...
    if random.random() < 0.5:  # ... and Python random
        x = x + 0.05 * torch.randn_like(x)
    loss = F.cross_entropy(net(x), y, label_smoothing=smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


# ----------------------------------------------------------------------------------- checkpoints
def temporary_path(path: str) -> str:
    """Where :func:`atomic_save` writes before the rename: a hidden file next to ``path``."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{os.getpid()}.tmp")


def atomic_save(obj: Any, path: str) -> None:
    """Write ``obj`` to a temporary file in the same directory, fsync it, then rename it over ``path``.

    A crash at any point leaves either the old file or the new one, never a mix.
    """
    buf = io.BytesIO()
    torch.save(obj, buf)
    tmp = temporary_path(path)
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(tmp), os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)


def save_checkpoint(path: Optional[str], rank: int, **training_state: Any) -> None:
    """Every rank's seeder state (a collective) plus ``training_state``, written by rank 0."""
    if path is None:
        return
    state = seeder.gather_state_dict()
    if rank == 0:
        atomic_save({**training_state, "seeder": state}, path)
    if dist.is_initialized():
        dist.barrier()


def load_checkpoint(path: Optional[str], resume: bool, rank: int) -> Optional[Dict[str, Any]]:
    """The checkpoint at ``path`` when resuming and there is one, else None.

    Creates the directory, and rank 0 removes the temporary files of a write that was killed.
    """
    if path is None:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if rank == 0:
        for tmp in glob.glob(os.path.join(os.path.dirname(path), f".{CKPT_NAME}.*.tmp")):
            os.remove(tmp)
    return torch.load(path, map_location="cpu", weights_only=True) if resume and os.path.exists(path) else None


# --------------------------------------------------------------------------------------- metrics
class Metrics:
    """Per-step JSON lines (the ``--metrics`` contract), written by rank 0 and flushed every line."""

    def __init__(self, path: Optional[str], rank: int):
        self.path = path if rank == 0 else None
        self.f = None

    def truncate_after(self, step: int) -> None:
        """On resume: drop records the resumed run will write again (steps after the checkpoint, old digests)."""
        if self.path is None or not os.path.exists(self.path):
            return
        keep = []
        with open(self.path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:  # a line cut by a kill
                    continue
                if "loss" in rec and rec.get("step", 0) <= step:
                    keep.append(json.dumps(rec) + "\n")
        with open(self.path + ".tmp", "w") as f:
            f.writelines(keep)
        os.replace(self.path + ".tmp", self.path)

    def write(self, record: Dict[str, Any]) -> None:
        if self.path is None:
            return
        if self.f is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self.f = open(self.path, "a")
        self.f.write(json.dumps(record) + "\n")
        self.f.flush()


# ------------------------------------------------------------------------------------------ main
def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A small training run seeded by seeder, resumable bit for bit.")
    p.add_argument("--seed", type=int, default=None, help="master seed; default None draws one (logged)")
    p.add_argument("--epochs", type=int, default=4, help="epochs of the full run")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint directory (DIR/last.pt); default: no checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from DIR/last.pt if it exists")
    p.add_argument("--stop-after-epochs", type=int, default=None, help="exit after K epochs done and checkpointed")
    p.add_argument("--stop-after-steps", type=int, default=None, help="exit after global step S done and checkpointed")
    p.add_argument("--ckpt-every-steps", type=int, default=0, help="also checkpoint every K global steps (0: epoch ends only)")
    p.add_argument("--metrics", default=os.environ.get("SEEDER_METRICS"), help="append per-step metrics (JSON lines)")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--samples", type=int, default=2048, help="dataset size")
    p.add_argument("--loader", choices=["torch", "dali"], default="torch",
                   help="torch: DataLoader + seeder.DistributedSampler; dali: a DALI CPU pipeline (needs seeder[dali])")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "samples"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.persistent_workers and args.workers == 0:
        p.error("--persistent-workers needs --workers >= 1")
    return args


def init_distributed() -> Tuple[int, int, int]:
    """(rank, world size, local rank); under torchrun, a gloo process group."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Keys of an earlier torchrun attempt (--max-restarts) stay in the launcher's store; a prefix per attempt
        # keeps gloo from connecting to the addresses of processes that died.
        store, rank, world = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(f"train-attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
        return rank, world, int(os.environ.get("LOCAL_RANK", "0"))
    return 0, 1, 0


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rank, world, local_rank = init_distributed()

    # NVIDIA's recipe: init, record the seed, reseed(0, 0) before the model is built.
    seeder.init(master_seed=args.seed, ngpus=world, local_rank=local_rank)
    args.seed = seeder.get_master_seed()
    seeder.reseed(0, 0)
    model = build_model(args.loader)
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)

    ckpt_path = os.path.join(args.ckpt_dir, CKPT_NAME) if args.ckpt_dir else None
    ckpt = load_checkpoint(ckpt_path, args.resume, rank)
    loader = make_loader(args, ckpt["seeder"] if ckpt else None)
    start_epoch, step = 0, 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        seeder.load_state_dict(ckpt["seeder"])  # each rank takes its own entry; validated before anything changes
        args.seed = seeder.get_master_seed()
        step = ckpt["step"]
        start_epoch = ckpt["epoch"] + 1 if ckpt["epoch_complete"] else ckpt["epoch"]
        logging.getLogger("train").info("resumed: epoch %d, step %d, seed %d", start_epoch, step, args.seed)
    metrics = Metrics(args.metrics, rank)
    if args.resume:
        metrics.truncate_after(step)  # records past the checkpoint are about to be redone

    def checkpoint(epoch: int, epoch_complete: bool) -> None:
        save_checkpoint(ckpt_path, rank, model=model.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), epoch=epoch, epoch_complete=epoch_complete, step=step)

    for epoch in range(start_epoch, args.epochs):
        seeder.reseed(1, epoch)  # skipped right after a mid-epoch resume: the loaded state continues the epoch
        net.train()
        for x, y in loader:
            loss = train_step(net, optimizer, x, y)
            step += 1
            metrics.write({"step": step, "epoch": epoch, "loss": loss})
            stop = args.stop_after_steps is not None and step >= args.stop_after_steps
            if stop or (args.ckpt_every_steps and step % args.ckpt_every_steps == 0):
                checkpoint(epoch, epoch_complete=False)
            if stop:
                return finish(model, optimizer, metrics, rank, epoch, step)
        scheduler.step()
        checkpoint(epoch, epoch_complete=True)
        if args.stop_after_epochs is not None and epoch + 1 >= args.stop_after_epochs:
            return finish(model, optimizer, metrics, rank, epoch + 1, step)
    return finish(model, optimizer, metrics, rank, args.epochs, step)


def finish(model: torch.nn.Module, optimizer: torch.optim.Optimizer, metrics: Metrics, rank: int,
           epochs_done: int, step: int) -> int:
    """Record the digest of weights and optimizer state (metrics file and last stdout line); leave the group."""
    digest = seeder.digest(model, optimizer)
    metrics.write({"digest": digest, "epoch": epochs_done, "step": step})
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:  # one line: torchrun interleaves the ranks' stdout
        print(f"DIGEST {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
