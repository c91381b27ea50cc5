"""Small training scripts, each with a defect whose cause ``seeder verify`` names: ``--bug NAME``.

* ``prefetch``: an iteration-based loop (batches drawn with ``torch.randint``, no epochs) that
  draws the next batch before the step ends, as karpathy/nanoGPT's train.py does: the
  checkpoint holds the RNG after that draw, and the resumed run draws the batch again.
* ``skip-loop``: an epoch loop over ``seeder.DataLoader`` that resumes with the common skip idiom
  (``if i < done: continue``) although the loader already resumes at its position: the
  resumed epoch's batches are discarded.
* ``shared-ckpt``: a script that resumes whenever its checkpoint exists, at
  ``../shared/last.pt``, outside the run's directory: runs continue each other's checkpoints.
* ``no-reseed``: an epoch loop over ``seeder.DataLoader`` with no ``seeder.reseed(1, epoch)``:
  each pass repeats the first one's order, and a resumed run's loader has no pass to repeat.
* ``none``: the iteration-based loop drawing each batch inside its step (exact).

No flag of verify's: seeder records the steps, stops the runs through ``seeder.Checkpoint`` and
resumes them.
"""

import argparse
import os

import torch

import seeder

parser = argparse.ArgumentParser()
parser.add_argument(
    "--bug", default="none", choices=["none", "prefetch", "skip-loop", "shared-ckpt", "no-reseed"]
)
args = parser.parse_args()

seeder.init()
seeder.reseed(0, 0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
xs = torch.linspace(-1, 1, 48)
data = torch.stack([xs, xs**2, xs.sin(), xs.cos()], 1)
target = (2 * xs + 0.5)[:, None]


def train_step(x, y):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def get_batch():
    ix = torch.randint(len(data), (8,))
    return data[ix], target[ix]


if args.bug == "skip-loop":
    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    start = ckpt.resume()
    loader = seeder.DataLoader(
        torch.utils.data.TensorDataset(data, target), batch_size=8, shuffle=True
    )
    skip = ckpt.steps - start * len(loader)  # steps done of the resumed epoch
    for epoch in range(start, 3):
        seeder.reseed(1, epoch)
        for i, (x, y) in enumerate(loader):
            if i < skip:
                continue  # the defect: the loader already starts at the batch after the checkpoint
            train_step(x, y)
            ckpt.step()
        skip = 0
elif args.bug == "no-reseed":
    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    start = ckpt.resume()
    loader = seeder.DataLoader(
        torch.utils.data.TensorDataset(data, target), batch_size=8, shuffle=True
    )
    for _epoch in range(start, 3):  # the defect: no seeder.reseed(1, epoch)
        for x, y in loader:
            train_step(x, y)
            ckpt.step()
elif args.bug == "shared-ckpt":
    path = os.path.join("..", "shared", "last.pt")  # the defect: outside the run's directory
    ckpt = seeder.Checkpoint(path, model=model, optimizer=optimizer)
    ckpt.resume(os.path.exists(path))
    for _it in range(ckpt.steps, 18):
        train_step(*get_batch())
        ckpt.step()
    ckpt.save()
else:
    ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
    ckpt.resume()
    if args.bug == "prefetch":
        x, y = get_batch()  # the first batch, before the loop
    for _it in range(ckpt.steps, 24):
        if args.bug == "none":
            x, y = get_batch()
        loss = ((model(x) - y) ** 2).mean()
        if args.bug == "prefetch":
            x, y = get_batch()  # the defect: the next batch, drawn before this step ends
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ckpt.step()
print("done")
