"""torchrun script: ``seeder.IterableDataLoader`` over streams on every rank of a gloo process
group.

For a plain stream (``seeder.data.stream_share``, 2 workers) and a shuffled ``datasets`` stream
(split by node by seeder, 0 workers), each rank runs epochs 0 and 1, taking ``seeder.state_dict()``
after
batch 3; a fresh seeder and loader resume from it (through torch.save/load) to the end of epoch 1.
Prints ``STREAM {"rank", "kind", "want", "got"}`` (batches as plain lists). argv: master seed.
"""

import io
import json
import sys

import torch
import torch.distributed as dist
from stream_common import Noisy, flat, hf_stream

import seeder

STOP = 3


def epochs(s, loader):
    """Epochs 0 and 1, and ``seeder.state_dict()`` after batch ``STOP`` of epoch 0 (through
    torch.save)."""
    out, saved = [], None
    for epoch in (0, 1):
        s.reseed(1, epoch)
        for batch in loader:
            out.append(flat(batch))
            if epoch == 0 and len(out) == STOP:
                buf = io.BytesIO()
                torch.save(s.state_dict(), buf)
                saved = buf.getvalue()
    return out, saved


def main():
    master = int(sys.argv[1])
    dist.init_process_group("gloo")
    streams = (
        ("plain", lambda: Noisy(26), 2),
        ("datasets", lambda: hf_stream(32, shuffle=True, shards=8), 0),
    )
    for kind, make, workers in streams:
        s = seeder.Seeder()
        s.init(master)
        want, saved = epochs(
            s, seeder.IterableDataLoader(make(), batch_size=2, num_workers=workers, seeder=s)
        )
        s2 = seeder.Seeder()
        s2.init(master)
        again = seeder.IterableDataLoader(make(), batch_size=2, num_workers=workers, seeder=s2)
        s2.load_state_dict(torch.load(io.BytesIO(saved), weights_only=True))
        got = want[:STOP]
        for epoch in (0, 1):
            s2.reseed(1, epoch)
            got.extend(flat(b) for b in again)
        sys.stdout.write(
            "STREAM "
            + json.dumps({"rank": dist.get_rank(), "kind": kind, "want": want, "got": got})
            + "\n"
        )
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
