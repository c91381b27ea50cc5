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


def main():
    p = contract_parser()
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--bug", default="none")
    a = p.parse_args()
    seeder.init(master_seed=a.seed, ngpus=1, local_rank=0)
    seeder.reseed(0, 0)
    x, y, model = regression_task(N, dropout=0.2)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)

    epoch0, step, order, pos = 0, 0, None, 0
    ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
    if a.resume and ckpt and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        epoch0, step, pos = st["epoch"], st["step"], st["pos"]
        order = st["order"] if pos else None
        if a.bug != "no-seeder-state":
            seeder.load_state_dict(st["seeder"])

    def save(epoch, order, pos):
        if not ckpt:
            return
        os.makedirs(a.ckpt_dir, exist_ok=True)
        tmp = ckpt + ".tmp"
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "epoch": epoch,
                "step": step,
                "pos": pos,
                "order": order if order is not None else torch.zeros(0, dtype=torch.long),
                "seeder": seeder.state_dict(),
            },
            tmp,
        )
        os.replace(tmp, ckpt)

    metrics = a.metrics or os.environ.get("SEEDER_METRICS")
    out = open(metrics, "a") if metrics else None
    for epoch in range(epoch0, a.epochs):
        seeder.reseed(
            1, epoch
        )  # skipped once after load_state_dict: the RNG states already continue this epoch
        if order is None:
            order, pos = torch.randperm(N), 0
        while pos < N:
            idx = order[pos : pos + BATCH]
            loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            pos += BATCH
            if out:
                out.write(json.dumps({"step": step, "epoch": epoch, "loss": loss.item()}) + "\n")
            step += 1
            if a.stop_after_steps is not None and step >= a.stop_after_steps:
                if pos < N:
                    save(epoch, order, pos)
                else:
                    save(epoch + 1, None, 0)
                return 0
        order = None
        save(epoch + 1, None, 0)
        if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
            return 0
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.numpy().tobytes())
    if out:
        out.write(
            json.dumps({"digest": h.hexdigest()[:32], "epoch": a.epochs, "step": step - 1}) + "\n"
        )
    print(f"DIGEST {h.hexdigest()[:32]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
