"""A plain loop ported to seeder, with no flag of verify's contract: ``seeder verify -- python
plain_loop.py``.

The three lines marked ``# verify`` are seeder.Checkpoint's (a checkpoint, a resume, a step);
``--no-checkpoint`` leaves them out (a script with no resume option).
"""

import sys

import torch

import seeder

seeder.init()  # the seed: $SEEDER_SEED (verify's seeded runs), else drawn
seeder.reseed(0, 0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
xs = torch.linspace(-1, 1, 48)
data = torch.utils.data.TensorDataset(
    torch.stack([xs, xs**2, xs.sin(), xs.cos()], 1), (2 * xs + 0.5)[:, None]
)
loader = seeder.DataLoader(data, batch_size=8, shuffle=True)
use_ckpt = "--no-checkpoint" not in sys.argv
ckpt = (
    seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer) if use_ckpt else None
)  # verify
start = ckpt.resume() if use_ckpt else 0  # verify
for epoch in range(start, 3):
    seeder.reseed(1, epoch)
    for x, y in loader:
        loss = ((model(x + 0.1 * torch.randn_like(x)) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if use_ckpt:
            ckpt.step()  # verify
print("done")
