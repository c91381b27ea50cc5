"""The README's quick start as a script: a parser with --seed, seeder.init, one seeder.DataLoader,
and a checkpoint written with ``torch.save`` of ``seeder.state_dict()`` at every step, but no
``seeder.Checkpoint`` and no resume.

``seeder verify`` cannot stop or resume it, so both resume checks are SKIP and the verdict
INCOMPLETE (exit 4).
"""

import argparse

import torch

import seeder

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=None)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
seeder.init(master_seed=args.seed)
args.seed = seeder.get_master_seed()
seeder.reseed(0, 0)
model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
xs = torch.linspace(-1, 1, 32)
loader = seeder.DataLoader(
    torch.utils.data.TensorDataset(torch.stack([xs, xs**2], 1), xs[:, None]),
    batch_size=8,
    shuffle=True,
)
for epoch in range(0, args.epochs):
    seeder.reseed(1, epoch)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "seeder": seeder.state_dict(),
            },
            "last.pt",
        )
