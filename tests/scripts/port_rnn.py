"""An RNN language model shaped like pytorch/examples ``word_language_model/main.py`` (shrunk)
ported to seeder: ``seeder verify -- python port_rnn.py``.

No torch optimizer: the update is written by hand (``p.data.add_(p.grad, alpha=-lr)``); the hidden
state is carried from batch to batch, and started afresh each epoch; dropout draws from torch's
global RNG; the best loss so far is kept. The lines marked ``# port`` are the port: the seed, the
initialisation's reseed, the checkpoint (the hidden state and the best loss in its ``values``), its
resume, the epoch the loop starts at, the epoch's reseed, the batch a resumed epoch continues at and
its hidden state, the values kept up to date, the step. ``--bug clock`` draws the input noise from a
generator seeded from the clock.
"""

import sys
import time

import torch

import seeder

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""
NTOKENS, BSZ, BPTT, EPOCHS, LR = 12, 4, 5, 3, 2.0


class RNNModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = torch.nn.Dropout(0.2)
        self.encoder = torch.nn.Embedding(NTOKENS, 8)
        self.rnn = torch.nn.GRU(8, 16)
        self.decoder = torch.nn.Linear(16, NTOKENS)

    def forward(self, x, hidden, noise=None):
        emb = self.drop(self.encoder(x))
        if noise is not None:
            emb = emb + 0.01 * torch.randn(emb.shape, generator=noise)
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)), hidden

    def init_hidden(self, bsz):
        return torch.zeros(1, bsz, 16)


seeder.init()  # port: the seed is $SEEDER_SEED (verify's seeded runs), else drawn
seeder.reseed(0, 0)  # port: the models' initialisation draws
corpus = (torch.arange(121) * 7 + torch.arange(121) // 5) % NTOKENS
train_data = corpus[: corpus.numel() // BSZ * BSZ].view(BSZ, -1).t().contiguous()
model = RNNModel()
criterion = torch.nn.CrossEntropyLoss()
clock = torch.Generator().manual_seed(time.time_ns()) if BUG == "clock" else None
ckpt = seeder.Checkpoint(  # port: the hidden state and the best loss go in its values
    "ckpt/last.pt", model=model, values={"hidden": model.init_hidden(BSZ), "best": float("inf")}
)
start = ckpt.resume()  # port
best = ckpt.values["best"]  # port: was float("inf")
starts = list(range(0, train_data.size(0) - 1, BPTT))
for epoch in range(start, EPOCHS):  # port: was range(EPOCHS)
    seeder.reseed(1, epoch)  # port
    model.train()
    first = ckpt.steps - epoch * len(starts)  # port: a resumed epoch continues at its batch
    hidden = ckpt.values["hidden"] if first else model.init_hidden(BSZ)  # port: and its hidden
    for i in starts[first:]:  # port: was starts
        seq_len = min(BPTT, len(train_data) - 1 - i)
        data, targets = train_data[i : i + seq_len], train_data[i + 1 : i + 1 + seq_len].reshape(-1)
        model.zero_grad()
        output, hidden = model(data, hidden.detach(), clock)
        loss = criterion(output.view(-1, NTOKENS), targets)
        best = min(best, loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-LR)
        ckpt.values.update(hidden=hidden.detach(), best=best)  # port
        ckpt.step()  # port
print(f"done, best loss {best:.4f}")
