"""Launched by torchrun in tests: report this rank's view of the seeder as one JSON line."""

import argparse
import json
import os
import random
import sys

import torch
import torch.distributed as dist

import seeder

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=None)
p.add_argument(
    "--seed-plus-rank", action="store_true", help="give each rank a different explicit seed"
)
args = p.parse_args()


def emit(tag, obj):
    sys.stdout.write(f"{tag} {json.dumps(obj)}\n")  # one write: lines of two ranks never interleave
    sys.stdout.flush()


dist.init_process_group("gloo")
rank, local_rank, world = dist.get_rank(), int(os.environ["LOCAL_RANK"]), dist.get_world_size()
seed = args.seed + rank if args.seed_plus_rank else args.seed
try:
    seeder.init(master_seed=seed, ngpus=world, local_rank=local_rank)
except RuntimeError as exc:
    emit("ERROR", {"rank": rank, "error": str(exc)})
    dist.destroy_process_group()
    raise SystemExit(3) from None
seeder.reseed(1, 0)
row = {
    "rank": rank,
    "local_rank": local_rank,
    "seeder_rank": seeder.default_seeder().rank,
    "master": seeder.get_master_seed(),
    "seed": seeder.get_seed(1, 0),
    "shared": seeder.get_seed(1, 0, shared=True),
    "draw": random.random(),
    "torch": float(torch.rand(1)),
}
emit("ROW", row)
dist.destroy_process_group()
