"""Lightning ``fit`` under ``strategy="ddp"`` on CPU (gloo, 2 processes) with SeederCallback, then
resumes.

Lightning's launcher starts rank 1 by running this script again. In the same processes it
runs the full fit (a checkpoint every step), then ``fit(ckpt_path=...)`` from each step
given. Rank 0 saves per-step losses and final weights of each run to ``OUT/<name>.pt``
(``full``, ``resume<k>``)::

    python tests/scripts/lightning_ddp.py OUT --seed 3 --resume-from 4 3
"""

import argparse
import gc
import os

import torch
from lightning_common import run

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--resume-from", type=int, nargs="*", default=[])
    args = p.parse_args()
    torch.set_num_threads(1)
    ckpt_dir = os.path.join(args.out, "ckpt")
    runs = [("full", dict(ckpt_dir=ckpt_dir))]
    runs += [
        (f"resume{k}", dict(ckpt_path=os.path.join(ckpt_dir, f"step={k}.ckpt")))
        for k in args.resume_from
    ]
    for name, kwargs in runs:
        r = run(args.seed, strategy="ddp", devices=2, num_nodes=1, **kwargs)
        trainer = r["trainer"]
        if trainer.global_rank == 0:
            torch.save(
                {
                    "losses": r["losses"],
                    "weights": r["weights"],
                    "world": trainer.world_size,
                    "sampler_replicas": trainer.train_dataloader.sampler.num_replicas,
                },
                os.path.join(args.out, f"{name}.pt"),
            )
        del r, trainer
        gc.collect()
    if (
        torch.distributed.is_initialized()
    ):  # a gloo group left to interpreter exit can abort the process (SIGABRT)
        torch.distributed.destroy_process_group()
