"""torchrun script: DataLoader workers seeded by seeder.data.worker_init_fn on every rank.

Prints ``WORKERS {"rank", "local_rank", "epoch", "rows": [[index, worker_id, python, numpy, torch,
member], ...]}``. argv: master seed.
"""

import json
import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import seeder


class Draws(Dataset):
    def __init__(self):
        self.member = random.Random(0)  # copied into every worker of every rank

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return (
            i,
            info.id,
            random.random(),
            float(np.random.random()),
            float(torch.rand(())),
            self.member.random(),
        )


def emit(line: str) -> None:
    """One write per line: both ranks share torchrun's stdout, and a single short write is not
    interleaved."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    dist.init_process_group("gloo")
    seeder.init(master_seed=int(sys.argv[1]))
    ds = Draws()
    seeder.register_generator(ds.member)
    loader = DataLoader(
        ds,
        batch_size=2,
        num_workers=2,
        worker_init_fn=seeder.data.worker_init_fn,
        generator=seeder.data.dataloader_generator(),
    )
    for epoch in (0, 1):
        seeder.reseed(1, epoch)
        rows = []
        for batch in loader:
            rows.extend(zip(*[c.tolist() for c in batch]))
        emit(
            "WORKERS "
            + json.dumps(
                {
                    "rank": dist.get_rank(),
                    "local_rank": int(os.environ["LOCAL_RANK"]),
                    "epoch": epoch,
                    "rows": rows,
                }
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
