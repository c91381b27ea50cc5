"""Child script: a tiny model with dropout trained through ``seeder.DataLoader`` (2 workers),
checkpointed every step.

argv: checkpoint path, number of epochs, then optionally ``--pause-after K``: after the
checkpoint of step K is on disk and its line printed, block reading stdin (the test kills
the process there with SIGKILL, a real mid-epoch death with live workers).

If the checkpoint exists, the run resumes from it. Prints ``STEP {"step", "epoch", "loss"}``
after each step (loss as float.hex, exact) and ``DONE {"weights": sha256}`` at the end.
"""

import hashlib
import json
import os
import random
import sys

import numpy as np
import torch

import seeder

N, BS, WORKERS = 22, 4, 2  # 6 steps an epoch, the last one short


class Noisy(torch.utils.data.Dataset):
    """Features from the index plus noise drawn from random, NumPy's global RNG and torch's CPU
    generator."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = torch.tensor(
            [i / N, random.random(), float(np.random.normal()), 0.0]
        ) + 0.1 * torch.randn(4)
        return x, torch.tensor([float(i % 3)])


def emit(tag, obj):
    sys.stdout.write(f"{tag} {json.dumps(obj)}\n")
    sys.stdout.flush()


def main():
    ckpt, epochs = sys.argv[1], int(sys.argv[2])
    pause = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--pause-after" else None
    torch.set_num_threads(1)
    seeder.init(master_seed=2024)
    seeder.reseed(0, 0)  # the model's initialisation
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = seeder.DataLoader(
        Noisy(), batch_size=BS, shuffle=True, num_workers=WORKERS, persistent_workers=True
    )
    start_epoch, step = 0, 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        seeder.load_state_dict(state["seeder"])
        start_epoch, step = state["seeder"]["last_reseed"][1], state["step"]
    for epoch in range(start_epoch, epochs):
        seeder.reseed(1, epoch)
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            tmp = ckpt + ".tmp"
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "seeder": seeder.state_dict(),
                    "step": step,
                },
                tmp,
            )
            os.replace(
                tmp, ckpt
            )  # atomic: a kill leaves the previous checkpoint or this one, never half of one
            emit("STEP", {"step": step, "epoch": epoch, "loss": loss.item().hex()})
            if step == pause:
                sys.stdin.readline()  # the test kills us here
    digest = hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())
    ).hexdigest()
    emit("DONE", {"weights": digest})


if __name__ == "__main__":
    main()
