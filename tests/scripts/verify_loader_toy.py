"""A torch training script on the real seeder with a plain torch DataLoader, following the
examples/train.py contract.

``seeder.data.watch_loader(DataLoader(dataset, sampler=seeder.DistributedSampler(dataset),
generator=...))``, dropout from torch's global RNG, ``sampler.advance(len(y))`` after each step, and
a checkpoint with the model, the optimizer and ``seeder.state_dict()``: a resume from
any step is exact. ``--bug`` plants a mistake the issue measured; each one keeps the
epoch-boundary resume exact and breaks only a mid-epoch resume:

* ``no-generator``: the DataLoader gets no ``generator=``, so each ``iter(loader)``
  draws its base seed from torch's global RNG;
* ``no-advance``: the loop never calls ``sampler.advance``, so a mid-epoch checkpoint
  holds position 0 and the resumed run starts the epoch over.
"""

import hashlib
import json
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset
from verify_contract import (  # tests/scripts/, the script's own directory
    contract_parser,
    regression_task,
)

import seeder

N, BATCH = 48, 8


def make_loader(a, dataset):
    """The watched DataLoader over ``seeder.DistributedSampler`` (without its ``generator=`` under
    ``no-generator``) and the sampler."""
    sampler = seeder.DistributedSampler(dataset)
    loader = seeder.data.watch_loader(
        DataLoader(
            dataset,
            batch_size=BATCH,
            sampler=sampler,
            num_workers=a.workers,
            generator=None if a.bug == "no-generator" else seeder.data.dataloader_generator(),
        )
    )
    return loader, sampler


class Run:
    """One run's model, optimizer, loader and step, its checkpoint and its loop."""

    def __init__(self, a):
        self.a = a
        x, y, self.model = regression_task(N, dropout=0.3)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.loader, self.sampler = make_loader(a, TensorDataset(x, y))
        self.epoch0, self.step = 0, 0
        self.ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
        self.out = None

    def load(self):
        """Continue from the checkpoint where ``--resume`` asks and one exists."""
        if not (self.a.resume and self.ckpt and os.path.exists(self.ckpt)):
            return
        st = torch.load(self.ckpt, weights_only=True)
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optimizer"])
        seeder.load_state_dict(st["seeder"])
        self.epoch0, self.step = st["epoch"] + (1 if st["epoch_complete"] else 0), st["step"]

    def save(self, epoch, complete):
        if self.ckpt:
            os.makedirs(self.a.ckpt_dir, exist_ok=True)
            torch.save(
                {
                    "model": self.model.state_dict(),
                    "optimizer": self.opt.state_dict(),
                    "epoch": epoch,
                    "epoch_complete": complete,
                    "step": self.step,
                    "seeder": seeder.state_dict(),
                },
                self.ckpt + ".tmp",
            )
            os.replace(self.ckpt + ".tmp", self.ckpt)

    def train_batch(self, epoch, xb, yb):
        """One step; whether ``--stop-after-steps`` stops the run here (saved)."""
        loss = torch.nn.functional.mse_loss(self.model(xb), yb)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.a.bug != "no-advance":
            self.sampler.advance(len(yb))
        self.step += 1
        if self.out:
            self.out.write(
                json.dumps({"step": self.step, "epoch": epoch, "loss": loss.item()}) + "\n"
            )
            self.out.flush()
        if self.a.stop_after_steps is not None and self.step >= self.a.stop_after_steps:
            self.save(epoch, complete=False)
            return True
        return False

    def train(self):
        """The epochs left; the exit status."""
        a = self.a
        for epoch in range(self.epoch0, a.epochs):
            seeder.reseed(
                1, epoch
            )  # skipped right after a mid-epoch resume: the loaded state continues the epoch
            for xb, yb in self.loader:
                if self.train_batch(epoch, xb, yb):
                    return 0
            self.save(epoch, complete=True)
            if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
                return 0
        h = hashlib.sha256(
            b"".join(t.numpy().tobytes() for t in self.model.state_dict().values())
        ).hexdigest()[:32]
        if self.out:
            self.out.write(json.dumps({"digest": h, "epoch": a.epochs, "step": self.step}) + "\n")
        print(f"DIGEST {h}")
        return 0


def main():
    p = contract_parser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--bug", choices=["none", "no-generator", "no-advance"], default="none")
    a = p.parse_args()
    seeder.init(master_seed=a.seed, ngpus=1, local_rank=0)
    seeder.reseed(0, 0)
    run = Run(a)
    run.load()
    run.out = open(a.metrics, "a") if a.metrics else None
    return run.train()


if __name__ == "__main__":
    sys.exit(main())
