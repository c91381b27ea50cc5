"""A small torch training script on the real seeder, following the examples/train.py contract.

Dropout and a per-epoch ``torch.randperm`` shuffle draw from the global torch RNG that
``seeder.reseed`` seeds; a checkpoint holds the model, the optimizer, the position in
the epoch and ``seeder.state_dict()``. ``--bug no-seeder-state`` plants the classic
mistake: resume loads everything but the seeder state, so a run resumed mid-epoch
continues with the wrong random stream.
"""

import hashlib
import json
import os
import sys

import torch
from verify_contract import (  # tests/scripts/, the script's own directory
    contract_parser,
    regression_task,
)

import seeder

N, BATCH = 96, 16


class Run:
    """One run's model, optimizer and position in the epoch, its checkpoint and its loop."""

    def __init__(self, a):
        self.a = a
        self.x, self.y, self.model = regression_task(N, dropout=0.2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr, momentum=0.9)
        self.epoch0, self.step, self.order, self.pos = 0, 0, None, 0
        self.ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
        self.out = None

    def load(self):
        """Continue from the checkpoint where ``--resume`` asks and one exists (without the seeder
        state under ``no-seeder-state``)."""
        if not (self.a.resume and self.ckpt and os.path.exists(self.ckpt)):
            return
        st = torch.load(self.ckpt, weights_only=True)
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["optimizer"])
        self.epoch0, self.step, self.pos = st["epoch"], st["step"], st["pos"]
        self.order = st["order"] if self.pos else None
        if self.a.bug != "no-seeder-state":
            seeder.load_state_dict(st["seeder"])

    def save(self, epoch, order, pos):
        if not self.ckpt:
            return
        os.makedirs(self.a.ckpt_dir, exist_ok=True)
        tmp = self.ckpt + ".tmp"
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "epoch": epoch,
                "step": self.step,
                "pos": pos,
                "order": order if order is not None else torch.zeros(0, dtype=torch.long),
                "seeder": seeder.state_dict(),
            },
            tmp,
        )
        os.replace(tmp, self.ckpt)

    def train_batch(self, epoch):
        """One step on the batch at the epoch's position; whether ``--stop-after-steps`` stops the
        run here (saved)."""
        idx = self.order[self.pos : self.pos + BATCH]
        loss = torch.nn.functional.mse_loss(self.model(self.x[idx]), self.y[idx])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.pos += BATCH
        if self.out:
            record = {"step": self.step, "epoch": epoch, "loss": loss.item()}
            self.out.write(json.dumps(record) + "\n")
        self.step += 1
        if self.a.stop_after_steps is None or self.step < self.a.stop_after_steps:
            return False
        if self.pos < N:
            self.save(epoch, self.order, self.pos)
        else:
            self.save(epoch + 1, None, 0)
        return True

    def train(self):
        """The epochs left; the exit status."""
        a = self.a
        for epoch in range(self.epoch0, a.epochs):
            seeder.reseed(
                1, epoch
            )  # skipped once after load_state_dict: the RNG states already continue this epoch
            if self.order is None:
                self.order, self.pos = torch.randperm(N), 0
            while self.pos < N:
                if self.train_batch(epoch):
                    return 0
            self.order = None
            self.save(epoch + 1, None, 0)
            if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
                return 0
        h = hashlib.sha256()
        for t in self.model.state_dict().values():
            h.update(t.numpy().tobytes())
        if self.out:
            record = {"digest": h.hexdigest()[:32], "epoch": a.epochs, "step": self.step - 1}
            self.out.write(json.dumps(record) + "\n")
        print(f"DIGEST {h.hexdigest()[:32]}")
        return 0


def main():
    p = contract_parser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--bug", default="none")
    a = p.parse_args()
    seeder.init(master_seed=a.seed, ngpus=1, local_rank=0)
    seeder.reseed(0, 0)
    run = Run(a)
    run.load()
    metrics = a.metrics or os.environ.get("SEEDER_METRICS")
    run.out = open(metrics, "a") if metrics else None
    return run.train()


if __name__ == "__main__":
    sys.exit(main())
