"""torchrun script: seeder.DistributedSampler on every rank of a gloo process group.

Prints one JSON line per epoch and rank: ``SAMPLER {"rank", "world", "epoch", "shard", "resumed"}``.
argv: master seed, dataset length.
"""

import json
import sys

import torch.distributed as dist

import seeder


def emit(line: str) -> None:
    """One write per line: both ranks share torchrun's stdout, and a single short write is not
    interleaved."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    master, n = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo")
    seeder.init(master_seed=master)
    sampler = seeder.DistributedSampler(range(n))  # rank and world from the process group
    for epoch in (0, 1):
        seeder.reseed(1, epoch)  # no set_epoch: the sampler follows the reseed
        shard = list(sampler)
        # Resume this epoch at position 5 in a new sampler, from rank 0's state (shared by all
        # ranks).
        it = iter(sampler)
        for _ in range(5):
            next(it)
        sampler.advance(5)
        states = [None] * dist.get_world_size()
        dist.all_gather_object(states, sampler.state_dict())
        again = seeder.DistributedSampler(range(n))
        again.load_state_dict(states[0])
        resumed = shard[:5] + list(again)
        emit(
            "SAMPLER "
            + json.dumps(
                {
                    "rank": dist.get_rank(),
                    "world": dist.get_world_size(),
                    "epoch": epoch,
                    "shard": shard,
                    "resumed": resumed,
                }
            )
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
