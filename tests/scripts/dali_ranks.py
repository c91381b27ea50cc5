"""Under torchrun: per-rank and shared DALI pipelines seeded by the seeder, and a checkpoint resume
on each rank.

Prints one line per rank: DALI {"rank", "seed", "shared_seed", "own", "shared", "resumed_own"} (run
digests) and "registers": what a plain ``Seeder.register_generator(pipeline)`` made of a pipeline
(its participant's class and pipeline id). ``--seeder-first``: seeder is imported, and that Seeder
initialised, before DALI is; else DALI is imported first (the user never imports seeder.data.dali
for the registration to work).
"""

import sys

SEEDER_FIRST = "--seeder-first" in sys.argv
if SEEDER_FIRST:
    import seeder

    registering = seeder.Seeder()
    registering.init(42)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dali_common as dc  # noqa: E402

import seeder  # noqa: E402
import seeder.data.dali as ds  # noqa: E402
import seeder.data.dali as sd  # noqa: E402

if not SEEDER_FIRST:
    registering = seeder.Seeder()
    registering.init(42)


def registers() -> list:
    """A pipeline given to ``register_generator``: its participant's class and pipeline id."""
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(1, seeder=registering))
    registering.register_generator(pipe)
    return [type(registering.participants()[0]).__name__, registering.participants()[0].pipeline_id]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seeder-first", action="store_true")
    args = parser.parse_args()
    registered = registers()
    dist.init_process_group("gloo")
    seeder.init(
        master_seed=args.seed, ngpus=dist.get_world_size(), local_rank=int(os.environ["LOCAL_RANK"])
    )
    seeder.reseed(0, 0)

    own = dc.augment_pipeline(**ds.pipeline_kwargs(0))
    shared = dc.augment_pipeline(**ds.pipeline_kwargs(1, shared=True))
    sd.track(own, 0)
    sd.track(shared, 1, shared=True)
    own_run, shared_run = dc.run(own, 6), dc.run(shared, 6)

    # resume on this rank: 3 batches, save, rebuild from the saved state in a fresh Seeder, 3 more
    first = seeder.Seeder()
    first.init(args.seed)
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=first))
    sd.track(pipe, 0, seeder=first)
    resumed = dc.run(pipe, 3)
    state = first.state_dict()
    second = seeder.Seeder()
    second.init(args.seed)
    pipe2 = dc.augment_pipeline(**ds.pipeline_kwargs(0, state=state, seeder=second))
    sd.track(pipe2, 0, seeder=second)
    second.load_state_dict(state)
    resumed += dc.run(pipe2, 3)

    row = {
        "rank": dist.get_rank(),
        "seed": own.seed,
        "shared_seed": shared.seed,
        "own": dc.digest(own_run),
        "shared": dc.digest(shared_run),
        "resumed_own": dc.digest(resumed),
        "registers": registered,
    }
    os.write(
        1, ("DALI " + json.dumps(row) + "\n").encode()
    )  # one write: ranks sharing a pipe never interleave
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
