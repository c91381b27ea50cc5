"""Child of tests/test_cuda.py: a small CUDA training run (conv + BatchNorm + dropout on the GPU,
CUDA noise in the main process, a registered CUDA generator, 2 DataLoader workers) that can stop at
a step or an epoch end, checkpoint, and resume. Prints ``RESULT {json}``: the losses (as float.hex),
the model+optimizer digest, the master seed, and what deterministic mode looked like. Wiring: the
README's (``seeder.DataLoader``, nothing else); ``--wiring manual`` uses the older
seeder.DistributedSampler + SeededDataset + generator= + advance() instead. ``--device cpu`` runs
the same harness without a GPU (tests/test_cuda.py checks the harness itself that way)."""

import argparse
import json
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import seeder

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=None)
p.add_argument("--epochs", type=int, default=3)
p.add_argument(
    "--stop-at-step", type=int, default=None, help="checkpoint after this global step and exit"
)
p.add_argument(
    "--stop-after-epochs",
    type=int,
    default=None,
    help="checkpoint after this many whole epochs and exit",
)
p.add_argument("--ckpt", default=None)
p.add_argument("--resume", action="store_true", help="load --ckpt first")
p.add_argument("--map-location", default="cpu")
p.add_argument("--device", default="cuda")
p.add_argument("--wiring", choices=["loader", "manual"], default="loader")
args = p.parse_args()


class Images(Dataset):
    """Fixed images; every item draws Python, NumPy and torch randomness in the worker."""

    def __init__(self, n: int = 96):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 3, 8, 8, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        if random.random() < 0.5:
            x = x.flip(-1)
        x = (x + 0.1 * torch.randn(x.shape)) * float(np.random.uniform(0.9, 1.1))
        return x, F.one_hot(self.y[i], 4).float()


cuda_started_before_init = torch.cuda.is_initialized()
seeder.init(
    master_seed=args.seed, deterministic=True
)  # before CUDA starts: cuBLAS reads its workspace setting once
seeder.reseed(0, 0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1),
    nn.BatchNorm2d(8),
    nn.ReLU(),
    nn.Dropout(0.2),
    nn.Flatten(),
    nn.Linear(8 * 8 * 8, 4),
).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
mask_gen = torch.Generator(device=args.device)
seeder.register_generator(mask_gen)
if args.wiring == "loader":
    sampler = None
    loader = seeder.DataLoader(Images(), batch_size=8, shuffle=True, num_workers=2)
else:
    train_set = seeder.data.SeededDataset(Images())
    sampler = seeder.DistributedSampler(train_set)
    loader = seeder.data.watch_loader(
        DataLoader(
            train_set,
            batch_size=8,
            sampler=sampler,
            num_workers=2,
            worker_init_fn=seeder.data.worker_init_fn,
            generator=seeder.data.dataloader_generator(),
        )
    )

start_epoch, step = 0, 0
if args.resume:
    ckpt = torch.load(args.ckpt, map_location=args.map_location, weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    seeder.load_state_dict(ckpt["seeder"])
    step = ckpt["step"]
    start_epoch = ckpt["epoch"] + 1 if ckpt["epoch_complete"] else ckpt["epoch"]
first_step, losses = step, []


def finish(epoch, epoch_complete):
    if args.ckpt and not args.resume:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "seeder": seeder.state_dict(),
                "epoch": epoch,
                "epoch_complete": epoch_complete,
                "step": step,
            },
            args.ckpt,
        )
    sys.stdout.write(
        "RESULT "
        + json.dumps(
            {
                "losses": losses,
                "first_step": first_step,
                "digest": seeder.digest(model, optimizer),
                "master": seeder.get_master_seed(),
                "cuda_started_before_init": cuda_started_before_init,
                "deterministic": torch.are_deterministic_algorithms_enabled(),
                "cudnn_deterministic": torch.backends.cudnn.deterministic,
                "cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
            }
        )
        + "\n"
    )
    sys.stdout.flush()
    raise SystemExit(0)


for epoch in range(start_epoch, args.epochs):
    seeder.reseed(
        1, epoch
    )  # skipped right after a mid-epoch resume: the loaded state continues the epoch
    if sampler is not None:
        sampler.set_epoch(epoch)
    model.train()
    for x, target in loader:
        x, target = x.to(args.device), target.to(args.device)
        x = x + 0.05 * torch.randn_like(x)  # device noise from the device's default generator
        x = x * (
            torch.rand(x.shape[0], 1, 1, 1, device=args.device, generator=mask_gen) > 0.1
        )  # the registered one
        loss = (
            -(target * F.log_softmax(model(x), dim=1)).sum(1).mean()
        )  # NLLLoss has no deterministic CUDA kernel
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if sampler is not None:
            sampler.advance(len(target))
        step += 1
        losses.append(float(loss.item()).hex())
        if step == args.stop_at_step:
            finish(epoch, False)
    if args.stop_after_epochs is not None and epoch + 1 == args.stop_after_epochs:
        finish(epoch, True)
finish(args.epochs - 1, True)
