"""A loop with an EMA of the user's own: a plain class holding a dict of tensors, with no
``state_dict``. Its shadow weights go in the checkpoint's ``values`` and come back after a resume.
``--bug no-ema`` leaves them out: a resumed run's EMA starts again from the model, which only the
per-step state of ``'ema.shadow'`` shows (the losses and the model resume exactly).
"""

import sys

import torch

import seeder

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""


class EMA:
    """An exponential moving average of a model's weights (no state_dict)."""

    def __init__(self, model, decay=0.9):
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model):
        for k, v in model.state_dict().items():
            self.shadow[k].mul_(self.decay).add_(v, alpha=1 - self.decay)


seeder.init()
seeder.reseed(0, 0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
ema = EMA(model)
xs = torch.linspace(-1, 1, 48)
data = torch.utils.data.TensorDataset(torch.stack([xs, xs**2, xs.sin(), xs.cos()], 1), xs[:, None])
loader = seeder.DataLoader(data, batch_size=8, shuffle=True)
ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=optimizer)
if BUG != "no-ema":
    ckpt.values["ema"] = ema.shadow
start = ckpt.resume()
if BUG != "no-ema" and ckpt.steps:
    ema.shadow = ckpt.values["ema"]
for epoch in range(start, 3):
    seeder.reseed(1, epoch)
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ema.update(model)
        ckpt.step()
torch.save(ema.shadow, "ema.pt")
