"""A DCGAN-shaped loop (pytorch/examples ``dcgan/main.py``, shrunk to points on a circle) ported to
seeder: ``seeder verify -- python port_gan.py``.

Two models, two optimizers, fixed noise, a generator with BatchNorm, and DCGAN's habit of sampling
the fixed noise every few batches with the generator in train mode (which moves its batch-norm
buffers), a sample file written each time. The lines marked ``# port`` are the whole port: the seed,
the initialisation's reseed, the loader, the checkpoint, its resume, the epoch the loop starts at,
the epoch's reseed, where ``enumerate`` starts, the step. ``--bug enumerate`` keeps DCGAN's
``enumerate(dataloader, 0)``: after a mid-epoch resume the sampling block runs once more and the
generator's buffers differ.
"""

import os
import sys

import torch

import seeder

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""
NZ, EPOCHS = 4, 3

seeder.init()  # port: the seed is $SEEDER_SEED (verify's seeded runs), else drawn
seeder.reseed(0, 0)  # port: the models' initialisation draws
netG = torch.nn.Sequential(
    torch.nn.Linear(NZ, 16),
    torch.nn.BatchNorm1d(16),
    torch.nn.ReLU(),
    torch.nn.Linear(16, 2),
    torch.nn.Tanh(),
)
netD = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
criterion = torch.nn.BCEWithLogitsLoss()
fixed_noise = torch.randn(8, NZ)
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
t = torch.linspace(0, 6.28, 48)
dataset = torch.utils.data.TensorDataset(torch.stack([t.cos(), t.sin()], 1) * 0.8)
dataloader = seeder.DataLoader(dataset, batch_size=8, shuffle=True)  # port: was torch's
ckpt = seeder.Checkpoint(  # port: both models, both optimizers, by name
    "ckpt/last.pt", netG=netG, netD=netD, optimizerD=optimizerD, optimizerG=optimizerG
)
start = ckpt.resume()  # port
os.makedirs("samples", exist_ok=True)


def save_sample(name: str) -> None:
    """The generator's output on the fixed noise, as an 8-bit grey image (PGM)."""
    fake = netG(fixed_noise).detach()
    pixels = ((fake.flatten() + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    with open(os.path.join("samples", name), "wb") as fh:
        fh.write(b"P5 %d 1 255\n" % pixels.numel() + bytes(pixels.tolist()))


for epoch in range(start, EPOCHS):  # port: was range(EPOCHS)
    seeder.reseed(1, epoch)  # port
    first = 0 if BUG == "enumerate" else dataloader.batches_done  # port
    for i, (real,) in enumerate(dataloader, first):  # port: was enumerate(dataloader, 0)
        b = real.size(0)
        netD.zero_grad()
        errD_real = criterion(netD(real), torch.ones(b, 1))
        errD_real.backward()
        fake = netG(torch.randn(b, NZ))
        errD_fake = criterion(netD(fake.detach()), torch.zeros(b, 1))
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        errG = criterion(netD(fake), torch.ones(b, 1))
        errG.backward()
        optimizerG.step()
        if i % 4 == 0:  # DCGAN samples the fixed noise here, the generator in train mode
            save_sample("fake_samples.pgm")
        ckpt.step()  # port
    save_sample(f"fake_samples_epoch_{epoch:03d}.pgm")
print("done")
