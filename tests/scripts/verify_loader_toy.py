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


def main():
    p = contract_parser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--bug", choices=["none", "no-generator", "no-advance"], default="none")
    a = p.parse_args()
    seeder.init(master_seed=a.seed, ngpus=1, local_rank=0)
    seeder.reseed(0, 0)
    x, y, model = regression_task(N, dropout=0.3)
    dataset = TensorDataset(x, y)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
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

    epoch0, step = 0, 0
    ckpt = os.path.join(a.ckpt_dir, "last.pt") if a.ckpt_dir else None
    if a.resume and ckpt and os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        seeder.load_state_dict(st["seeder"])
        epoch0, step = st["epoch"] + (1 if st["epoch_complete"] else 0), st["step"]

    def save(epoch, complete):
        if ckpt:
            os.makedirs(a.ckpt_dir, exist_ok=True)
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "epoch": epoch,
                    "epoch_complete": complete,
                    "step": step,
                    "seeder": seeder.state_dict(),
                },
                ckpt + ".tmp",
            )
            os.replace(ckpt + ".tmp", ckpt)

    out = open(a.metrics, "a") if a.metrics else None
    for epoch in range(epoch0, a.epochs):
        seeder.reseed(
            1, epoch
        )  # skipped right after a mid-epoch resume: the loaded state continues the epoch
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if a.bug != "no-advance":
                sampler.advance(len(yb))
            step += 1
            if out:
                out.write(json.dumps({"step": step, "epoch": epoch, "loss": loss.item()}) + "\n")
                out.flush()
            if a.stop_after_steps is not None and step >= a.stop_after_steps:
                save(epoch, complete=False)
                return 0
        save(epoch, complete=True)
        if a.stop_after_epochs is not None and epoch + 1 >= a.stop_after_epochs:
            return 0
    h = hashlib.sha256(
        b"".join(t.numpy().tobytes() for t in model.state_dict().values())
    ).hexdigest()[:32]
    if out:
        out.write(json.dumps({"digest": h, "epoch": a.epochs, "step": step}) + "\n")
    print(f"DIGEST {h}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
