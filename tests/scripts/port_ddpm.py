"""A DDPM-shaped loop (diffusers ``train_unconditional.py``, shrunk to a denoiser of 2-D points)
through accelerate, with an EMA model, ported to seeder: ``seeder verify -- python port_ddpm.py``.

Random timesteps and noise each step, an EMA of the model updated after each step, an LR scheduler,
and a final sample from the EMA written to ``samples/ema.pt``. The lines marked ``# port`` are the
port: the seed, the initialisation's reseed, the accelerator, the loader, the checkpoint (with the
EMA), its resume, the epoch the loop starts at, the epoch's reseed, the step. ``--bug no-ema``
leaves the EMA out of the checkpoint: a resumed run's EMA starts again from the model.
"""

import os
import sys

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import seeder
from seeder.integrations.accelerate import SeederAccelerator

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""
T, EPOCHS = 50, 3

seeder.init()  # port: the seed is $SEEDER_SEED (verify's seeded runs), else drawn
seeder.reseed(0, 0)  # port: the models' initialisation draws
accelerator = SeederAccelerator(cpu=True)  # port: was accelerate.Accelerator
betas = torch.linspace(1e-4, 0.2, T)
alphas_cumprod = torch.cumprod(1 - betas, 0)


class Denoiser(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(T, 8)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(10, 32), torch.nn.SiLU(), torch.nn.Linear(32, 2)
        )

    def forward(self, x, t):
        return self.net(torch.cat([x, self.embed(t)], 1))


model = Denoiser()
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
t = torch.linspace(0, 6.28, 48)
dataset = torch.utils.data.TensorDataset(torch.stack([t.cos(), (2 * t).sin()], 1))
loader = seeder.DataLoader(dataset, batch_size=8, shuffle=True)  # port: was torch's
model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
ckpt = seeder.Checkpoint(  # port: the EMA by name too (--bug no-ema: ema=None, left out)
    "ckpt/last.pt",
    model=model,
    optimizer=optimizer,
    lr_scheduler=lr_scheduler,
    ema=None if BUG == "no-ema" else ema,
)
start = ckpt.resume()  # port
for epoch in range(start, EPOCHS):  # port: was range(EPOCHS)
    seeder.reseed(1, epoch)  # port
    for (clean,) in loader:
        noise = torch.randn(clean.shape)
        timesteps = torch.randint(0, T, (clean.shape[0],))
        a = alphas_cumprod[timesteps][:, None]
        noisy = a.sqrt() * clean + (1 - a).sqrt() * noise
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(noisy, timesteps), noise)
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        ema.update_parameters(model)
        ckpt.step()  # port
with torch.no_grad():  # a sample from the EMA, as the pipeline saves its images
    x = torch.randn(8, 2)
    for step in reversed(range(T)):
        eps = ema(x, torch.full((8,), step))
        a, b = alphas_cumprod[step], betas[step]
        x = (x - b / (1 - a).sqrt() * eps) / (1 - b).sqrt()
os.makedirs("samples", exist_ok=True)
torch.save(x, "samples/ema.pt")
print("done")
