"""torchrun script: ``seeder.IterableDataLoader`` over sharded streams, stopped on one world and
resumed on another from a gathered state.

argv: phase (``stop`` or ``resume``), num_workers, a directory. For a plain stream through the
protocol (``Shards``), a ``datasets`` stream with a shuffle buffer and an augmenting ``.map``
(``by_shard=True``) and a ``seeder.data.Mix`` of two plain streams (weights ``OLD`` when it stops,
``NEW`` when it resumes):

* ``stop``: epoch 0 up to batch ``STOP`` of every rank, then ``seeder.gather_state_dict()``, which
  rank 0 writes to ``<dir>/<kind>.pt``;
* ``resume``: every rank loads that file with ``seeder.load_state_dict`` and runs the rest of
  epoch 0.

Each rank prints ``SHARDS {"rank", "kind", "rows", "weights"}``: the examples it trained, as rows,
and the mix's weights history after the load (``None`` for the other kinds).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from shard_common import MIX_NEW, MIX_OLD, Shards, flat, hf_sharded, mixed, rows

import seeder

MASTER, STOP, BATCH = 5, 2, 3


def shuffled(s, phase):
    return hf_sharded(shuffle=True)


def plain(s, phase):
    return Shards()


def mix(s, phase):
    return mixed(s, MIX_OLD if phase == "stop" else MIX_NEW)


def main():
    phase, workers, where = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    dist.init_process_group("gloo")
    for kind, make, by_shard in (
        ("plain", plain, None),
        ("datasets", shuffled, True),
        ("mix", mix, None),
    ):
        s = seeder.Seeder()
        s.init(MASTER)
        dataset = make(s, phase)
        loader = seeder.IterableDataLoader(
            dataset, batch_size=BATCH, num_workers=workers, seeder=s, by_shard=by_shard
        )
        path = where / f"{kind}.pt"
        if phase == "resume":
            s.load_state_dict(torch.load(path, weights_only=True))
        s.reseed(1, 0)
        got = []
        for batch in loader:
            got.append(flat(batch))
            if phase == "stop" and len(got) == STOP:
                break
        if phase == "stop":
            state = s.gather_state_dict()
            if dist.get_rank() == 0:
                torch.save(state, path)
        weights = dataset.state_dict()["weights"] if kind == "mix" else None
        line = {"rank": dist.get_rank(), "kind": kind, "rows": rows(got), "weights": weights}
        sys.stdout.write("SHARDS " + json.dumps(line) + "\n")
        sys.stdout.flush()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
