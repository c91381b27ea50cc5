"""Child script: a tiny model trained on a stream through ``seeder.IterableDataLoader`` (2
persistent workers), checkpointed every step.

The stream has no state of its own (a resume replays it). argv: checkpoint path, number of
epochs, then optionally ``--pause-after K``: after the checkpoint of step K is on disk and its
line printed, block reading stdin (the test kills the process there with SIGKILL).
Prints ``STEP {"step", "epoch", "loss"}`` (loss as float.hex) and ``DONE {"weights": sha256}``.
"""

import hashlib
import json
import os
import sys

import torch
from stream_common import Noisy

import seeder

N, BS = 22, 3  # 2 workers: 11 items each, 4 batches each, 8 steps an epoch


def emit(tag, obj):
    sys.stdout.write(f"{tag} {json.dumps(obj)}\n")
    sys.stdout.flush()


def main():
    ckpt, epochs = sys.argv[1], int(sys.argv[2])
    pause = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--pause-after" else None
    torch.set_num_threads(1)
    seeder.init(master_seed=2025)
    seeder.reseed(0, 0)
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = seeder.IterableDataLoader(
        Noisy(N), batch_size=BS, num_workers=2, persistent_workers=True
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
        for batch in loader:
            x, y = batch[:, 1:].float(), (batch[:, :1] % 3).float()
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
            os.replace(tmp, ckpt)
            emit("STEP", {"step": step, "epoch": epoch, "loss": loss.item().hex()})
            if step == pause:
                sys.stdin.readline()  # the test kills us here
    digest = hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for p in model.state_dict().values())
    ).hexdigest()
    emit("DONE", {"weights": digest})


if __name__ == "__main__":
    main()
