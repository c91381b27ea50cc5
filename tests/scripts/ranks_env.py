"""Started by tests/test_distributed_env.py with launcher variables (SLURM, Open MPI, PMI, torchrun)
and no process group: report this process's view of the seeder as one JSON line ``ROW {...}``, or
``ERROR {...}`` and exit 3 when ``seeder.init`` refuses. The INFO log (``seeder topology: ...``)
goes to stderr."""

import argparse
import json
import logging
import random
import sys

import torch

import seeder

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=None)
p.add_argument("--ngpus", type=int, default=None)
p.add_argument("--local-rank", type=int, default=None)
p.add_argument("--rank", type=int, default=None)
p.add_argument(
    "--init-twice", action="store_true", help="call seeder.init twice (the topology is logged once)"
)
args = p.parse_args()
logging.basicConfig(
    level=logging.INFO, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s"
)


def emit(tag, obj):
    sys.stdout.write(
        f"{tag} {json.dumps(obj)}\n"
    )  # one write: lines of two processes never interleave
    sys.stdout.flush()


try:
    for _ in range(2 if args.init_twice else 1):
        seeder.init(
            master_seed=args.seed, ngpus=args.ngpus, local_rank=args.local_rank, rank=args.rank
        )
except (ValueError, RuntimeError) as exc:
    emit(
        "ERROR",
        {
            "type": type(exc).__name__,
            "error": str(exc),
            "initialized": seeder.default_seeder().initialized,
        },
    )
    raise SystemExit(3) from None
seeder.reseed(1, 0)
s = seeder.default_seeder()
emit(
    "ROW",
    {
        "rank": s.rank,
        "world": s.world_size,
        "local": s.local_rank,
        "master": seeder.get_master_seed(),
        "seed": seeder.get_seed(1, 0),
        "shared": seeder.get_seed(1, 0, shared=True),
        "draw": random.random(),
        "torch": float(torch.rand(1)),
    },
)
