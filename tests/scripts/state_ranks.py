"""Child of tests/test_state_ranks.py, run under torchrun: save every rank's seeder state, or load
and continue.

``save DIR``: rank 0 writes the gathered state to DIR/all.pt, every rank its own DIR/rank<r>.pt, and
the values each rank draws next to DIR/expected<r>.json. ``load DIR``: fresh processes load both
layouts and write DIR/result<r>.json telling whether the draws continue exactly.
"""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np
import torch
import torch.distributed as dist

import seeder


def draws(gen: random.Random) -> list:
    return [random.random(), float(np.random.random()), float(torch.rand(1)), gen.random()]


def main(mode: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seeder.init(master_seed=None if mode == "load" else 4242)
    gen = random.Random()
    seeder.register_generator(gen)
    if mode == "save":
        seeder.reseed(1, 2)
        draws(gen)
        gathered = seeder.gather_state_dict()
        assert (gathered is None) == (rank != 0)
        if rank == 0:
            torch.save(gathered, os.path.join(out, "all.pt"))
        torch.save(seeder.state_dict(), os.path.join(out, f"rank{rank}.pt"))
        with open(os.path.join(out, f"expected{rank}.json"), "w") as f:
            json.dump(draws(gen), f)
    else:
        with open(os.path.join(out, f"expected{rank}.json")) as f:
            expected = json.load(f)
        result = {"rank": rank}
        for name, layout in (("gathered", "all.pt"), ("per_rank", f"rank{rank}.pt")):
            seeder.reseed(0, 0)  # move every RNG away from the saved states
            seeder.load_state_dict(torch.load(os.path.join(out, layout), weights_only=True))
            result[name] = draws(gen) == expected
        result["seed"] = seeder.get_master_seed()
        with open(
            os.path.join(out, f"result{rank}.json"), "w"
        ) as f:  # not stdout: torchrun interleaves ranks' lines
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
