#!/usr/bin/env python
"""A small real training run that uses seeder the way NVIDIA's seeder documents, and resumes bit for bit.

CPU only; one process or ``torchrun --nproc-per-node N`` (DDP on gloo)::

    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --metrics m.jsonl
    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --stop-after-epochs 2   # stop ...
    python examples/train.py --seed 42 --epochs 4 --ckpt-dir ckpt --resume                # ... and resume
    torchrun --nproc-per-node 2 examples/train.py --seed 42 --ckpt-dir ckpt --resume

What it shows: ``--seed`` (default None: seeder draws and logs one), ``seeder.init``,
``reseed(0, 0)`` before building the model, ``reseed(1, epoch)`` every epoch,
``seeder.DistributedSampler``, a DataLoader with workers seeded by seeder,
augmentation drawn from ``random``, NumPy and torch plus a member generator
registered like seed 004's ``Perturbation.reseed_rng``, dropout, an LR scheduler,
an atomic checkpoint (model, optimizer, scheduler, every rank's seeder state)
after every epoch and every ``--ckpt-every-steps`` steps, ``--resume``, stop
points, per-step metrics as JSON lines and the final digest (last stdout line
``DIGEST <hex>``).

Test hooks (environment variables; for the kill tests, harmless otherwise):
``SEEDER_EXAMPLE_CKPT_PAUSE=<seconds>`` with ``SEEDER_EXAMPLE_CKPT_PAUSE_AT=<step>``
sleeps in the middle of writing that step's checkpoint (half the bytes in the
temporary file) after printing ``CKPT_PAUSE <step>``; ``SEEDER_EXAMPLE_STEP_SLEEP=<seconds>``
slows every step; ``SEEDER_EXAMPLE_KILL_AT=<step>`` with ``SEEDER_EXAMPLE_KILL_RANK=<rank>``
makes that rank SIGKILL itself after that step, on the first torchrun attempt only.
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import logging
import os
import random
import signal
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import seeder

CKPT_NAME = "last.pt"
DALI_IMAGE, DALI_CROP, DALI_CHANNELS, DALI_CLASSES = 12, 8, 3, 10  # --loader dali: images and classes


# ----------------------------------------------------------------------------------------- data
class Perturbation:
    """Seed 004's member generator: a random gain drawn from its own ``random.Random``.

    ``reseed_rng`` is what NVIDIA's seeder registers. ``state_dict``/``load_state_dict``
    (seeder's owner protocol) let a checkpoint carry this generator's position too.
    """

    def __init__(self, low: float, high: float):
        self.low, self.high = low, high
        self._rng = random.Random()

    def reseed_rng(self, seed: int) -> None:
        self._rng.seed(seed)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * self._rng.uniform(self.low, self.high)

    def state_dict(self) -> Dict[str, Any]:
        version, words, gauss = self._rng.getstate()
        return {"version": version, "words": words, "gauss": gauss}

    def check_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict) or set(state) != {"version", "words", "gauss"} or len(state["words"]) != 625:
            raise seeder.StateError("Perturbation state must be {'version', 'words' (625 ints), 'gauss'}")

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self._rng.setstate((state["version"], tuple(state["words"]), state["gauss"]))


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

    def __getitem__(self, i: int):
        x = self.x[i].clone()
        x = torch.roll(x, random.randint(-1, 1))  # Python random
        x = x * float(np.random.uniform(0.9, 1.1))  # NumPy's global RNG
        x = x + 0.1 * torch.randn(x.shape)  # torch's global RNG
        for pert in self.perturbations:  # member generators
            x = pert(x)
        return x, self.y[i]


def build_model(dim: int = 32, classes: int = 8) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(64, classes))


# ----------------------------------------------------------------------------------- checkpoints
def atomic_save(obj: Any, path: str, step: int) -> None:
    """Write ``obj`` to a temporary file in the same directory, fsync it, then rename it over ``path``.

    A crash at any point leaves either the old file or the new one, never a mix.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    pause = float(os.environ.get("SEEDER_EXAMPLE_CKPT_PAUSE", "0") or 0)
    pause_at = os.environ.get("SEEDER_EXAMPLE_CKPT_PAUSE_AT")
    with open(tmp, "wb") as f:
        if pause and pause_at is not None and int(pause_at) == step:
            half = len(data) // 2
            f.write(data[:half])
            f.flush()
            os.fsync(f.fileno())
            print(f"CKPT_PAUSE {step}", flush=True)
            time.sleep(pause)
            f.write(data[half:])
        else:
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)


def remove_stale_temporaries(ckpt_dir: str) -> None:
    for tmp in glob.glob(os.path.join(ckpt_dir, f".{CKPT_NAME}.*.tmp")):
        os.remove(tmp)


# --------------------------------------------------------------------------------------- metrics
class Metrics:
    """Per-step JSON lines, written by rank 0 and flushed every line."""

    def __init__(self, path: Optional[str], rank: int):
        self.path = path if rank == 0 else None
        self.f = None

    def truncate_after(self, step: int) -> None:
        """On resume: drop records the resumed run will write again (steps after the checkpoint, old digests)."""
        if self.path is None or not os.path.exists(self.path):
            return
        with open(self.path) as f:
            rows = [line for line in f if line.strip()]
        keep = []
        for line in rows:
            try:
                rec = json.loads(line)
            except ValueError:  # a line cut by a kill
                continue
            if "loss" in rec and rec.get("step", 0) <= step:
                keep.append(json.dumps(rec) + "\n")
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(keep)
        os.replace(tmp, self.path)

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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = world > 1
    if distributed:
        # Keys of an earlier torchrun attempt (--max-restarts) stay in the launcher's store; a prefix per attempt
        # keeps gloo from connecting to the addresses of processes that died.
        store, rank, world = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(f"train-attempt-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    rank = dist.get_rank() if distributed else 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    # NVIDIA's recipe: init, record the seed, reseed(0, 0) before the model is built.
    seeder.init(master_seed=args.seed, ngpus=world, local_rank=local_rank)
    args.seed = seeder.get_master_seed()
    seeder.reseed(0, 0)
    model = build_model(*((DALI_CHANNELS * DALI_CROP**2, DALI_CLASSES) if args.loader == "dali" else (32, 8)))
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)

    ckpt_path = os.path.join(args.ckpt_dir, CKPT_NAME) if args.ckpt_dir else None
    ckpt = None
    if args.resume and ckpt_path and os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)

    sampler = None
    if args.loader == "dali":
        # DALI: the pipeline's seed comes from the seeder; a resumed pipeline is rebuilt from its DALI checkpoint.
        from dali_loader import DaliLoader

        loader = DaliLoader(batch_size=args.batch_size, dataset_size=args.samples, image_size=DALI_IMAGE,
                            crop=DALI_CROP, channels=DALI_CHANNELS, num_classes=DALI_CLASSES,
                            state=ckpt["seeder"] if ckpt else None)
    else:
        dataset = SyntheticDataset(args.samples)
        for pert in dataset.perturbations:
            seeder.register_generator(pert.reseed_rng)
        train_set = seeder.SeededDataset(dataset)  # augmentation: a pure function of (seed, epoch, index)
        sampler = seeder.DistributedSampler(train_set)
        loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            worker_init_fn=seeder.worker_init_fn, persistent_workers=args.persistent_workers,
                            generator=seeder.dataloader_generator())

    metrics = Metrics(args.metrics, rank)
    start_epoch, step = 0, 0
    if ckpt_path and rank == 0:
        os.makedirs(args.ckpt_dir, exist_ok=True)
        remove_stale_temporaries(args.ckpt_dir)
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        seeder.load_state_dict(ckpt["seeder"])  # every rank takes its own entry; validated before anything changes
        args.seed = seeder.get_master_seed()
        step = ckpt["step"]
        start_epoch = ckpt["epoch"] + 1 if ckpt["epoch_complete"] else ckpt["epoch"]
        logging.getLogger("train").info("resumed from %s: epoch %d, step %d, seed %d", ckpt_path, start_epoch, step, args.seed)

    if args.resume:
        metrics.truncate_after(step)  # records past the checkpoint (or all, starting fresh) are about to be redone

    def checkpoint(epoch: int, epoch_complete: bool) -> None:
        if ckpt_path is None:
            return
        state = seeder.gather_state_dict()  # collective: every rank's RNG and sampler state to rank 0
        if rank == 0:
            atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "seeder": state, "epoch": epoch,
                         "epoch_complete": epoch_complete, "step": step}, ckpt_path, step)
        if distributed:
            dist.barrier()

    def finish(epochs_done: int) -> int:
        digest = seeder.digest(model, optimizer)
        metrics.write({"digest": digest, "epoch": epochs_done, "step": step})
        if distributed:
            dist.barrier()
            dist.destroy_process_group()
        if rank == 0:  # one line: torchrun interleaves the ranks' stdout (they hold the same weights anyway)
            print(f"DIGEST {digest}", flush=True)
        return 0

    step_sleep = float(os.environ.get("SEEDER_EXAMPLE_STEP_SLEEP", "0") or 0)
    kill_at = os.environ.get("SEEDER_EXAMPLE_KILL_AT")
    kill_rank = int(os.environ.get("SEEDER_EXAMPLE_KILL_RANK", "0"))
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"

    for epoch in range(start_epoch, args.epochs):
        seeder.reseed(1, epoch)  # skipped right after a mid-epoch resume: the loaded state continues the epoch
        if sampler is not None:
            sampler.set_epoch(epoch)
        net.train()
        for x, y in loader:
            x, y = x.flatten(1), y.flatten()
            # Main-process randomness too: a label-smoothing amount from NumPy, input noise from Python random.
            smoothing = float(np.random.uniform(0.0, 0.1))
            if random.random() < 0.5:
                x = x + 0.05 * torch.randn_like(x)
            loss = F.cross_entropy(net(x), y, label_smoothing=smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if sampler is not None:
                sampler.advance(len(y))  # samples consumed: what a mid-epoch checkpoint resumes after
            step += 1
            metrics.write({"step": step, "epoch": epoch, "loss": loss.item()})
            if step_sleep:
                time.sleep(step_sleep)
            if kill_at is not None and int(kill_at) == step and rank == kill_rank and first_attempt:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.ckpt_every_steps and step % args.ckpt_every_steps == 0:
                checkpoint(epoch, epoch_complete=False)
            if args.stop_after_steps is not None and step >= args.stop_after_steps:
                if not (args.ckpt_every_steps and step % args.ckpt_every_steps == 0):
                    checkpoint(epoch, epoch_complete=False)
                return finish(epoch)
        scheduler.step()
        checkpoint(epoch, epoch_complete=True)
        if args.stop_after_epochs is not None and epoch + 1 >= args.stop_after_epochs:
            return finish(epoch + 1)
    return finish(args.epochs)


if __name__ == "__main__":
    sys.exit(main())
