"""A plain loop with seeder.Checkpoint that reads and writes relative paths, for ``seeder verify``'s
isolation.

Reads ``settings.txt`` (the learning rate) relative to its working directory, as a script next to
its configuration does; writes a log line to ``train.log`` and its checkpoint under ``--save-dir``
(default ``ckpt``; with ``--guide``, ``../outputs``: LambdaLabs' guide's default, which escapes the
run's folder). Without ``--resume-any``, it resumes only when seeder verify asks
(``seeder.Checkpoint.resume()``); with it, whenever its checkpoint exists. ``--log-losses`` prints
one JSON line per step with the loss (and no digest of its own).
"""

import argparse
import json
import os
import sys

import torch

import seeder

parser = argparse.ArgumentParser()
parser.add_argument("--save-dir", default="../outputs" if "--guide" in sys.argv else "ckpt")
parser.add_argument("--guide", action="store_true")
parser.add_argument("--resume-any", action="store_true")
parser.add_argument("--log-losses", action="store_true")
args = parser.parse_args()
with open("settings.txt") as fh:
    lr = float(fh.read())
seeder.init()
seeder.reseed(0, 0)
model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
xs = torch.linspace(-1, 1, 32)
loader = seeder.DataLoader(
    torch.utils.data.TensorDataset(torch.stack([xs, xs**2], 1), xs[:, None]),
    batch_size=8,
    shuffle=True,
)
path = os.path.join(args.save_dir, "last.pt")
ckpt = seeder.Checkpoint(path, model=model, optimizer=optimizer)
start = ckpt.resume(True if args.resume_any and os.path.exists(path) else None)
with open("train.log", "a") as log:
    log.write(f"start at epoch {start}\n")
for epoch in range(start, 3):
    seeder.reseed(1, epoch)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.log_losses:
            print(json.dumps({"step": ckpt.steps + 1, "epoch": epoch, "loss": loss.item()}))
        ckpt.step()
ckpt.save()
