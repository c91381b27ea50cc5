"""torchrun script: ``seeder.DataLoader(shuffle=True)`` on every rank of a gloo process group.

For epochs 0 and 1, each rank iterates its shard; in each epoch it takes ``seeder.state_dict()``
after batch 2, then a fresh seeder and loader resume from that state (through torch.save/load).
Prints one line per rank and epoch: ``LOADER {"rank", "epoch", "batches", "resumed"}``, batches
as lists of rows ``[index, random, numpy, torch]`` (float64, exact in JSON).
argv: master seed, dataset length.
"""

import io
import json
import random
import sys

import numpy as np
import torch
import torch.distributed as dist

import seeder

BS, STOP = 3, 2


class Noisy(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(
            [float(i), random.random(), float(np.random.random()), float(torch.rand(()))],
            dtype=torch.float64,
        )


def emit(line):
    """One write per line: both ranks share torchrun's stdout."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    master, n = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    s = seeder.Seeder()
    s.init(master)
    loader = seeder.DataLoader(
        Noisy(n), batch_size=BS, shuffle=True, seeder=s
    )  # sharded by the process group
    for epoch in (0, 1):
        s.reseed(1, epoch)
        batches, saved = [], None
        for batch in loader:
            batches.append(batch.tolist())
            if len(batches) == STOP:
                buf = io.BytesIO()
                torch.save(s.state_dict(), buf)
                saved = buf.getvalue()
        s2 = seeder.Seeder()
        s2.init(master)
        again = seeder.DataLoader(Noisy(n), batch_size=BS, shuffle=True, seeder=s2)
        s2.load_state_dict(torch.load(io.BytesIO(saved), weights_only=True))
        s2.reseed(1, epoch)
        resumed = [b.tolist() for b in again]
        emit(
            "LOADER "
            + json.dumps(
                {
                    "rank": dist.get_rank(),
                    "world": dist.get_world_size(),
                    "epoch": epoch,
                    "batches": batches,
                    "resumed": resumed,
                }
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
