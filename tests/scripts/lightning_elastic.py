"""Lightning ``fit`` with SeederCallback and an elastic seeder.DataLoader, on 1 process or 2
(``strategy="ddp"``, gloo).

``python tests/scripts/lightning_elastic.py OUT DEVICES TOKEN...``; Lightning's launcher starts rank
1 by running this script again. Each token, in the same processes:

* ``full``: fit 2 epochs, a checkpoint after every step (OUT/ckpt<DEVICES>/step=<k>.ckpt);
* ``<W>:<k>``: ``fit(ckpt_path=OUT/ckpt<W>/step=<k>.ckpt)``.

Every rank writes the rows it trained to OUT/full<DEVICES>_<rank>.pt or
OUT/resume<W>_<k>to<DEVICES>_<rank>.pt: one row per step, ``(epoch, global step, sample indices,
sample tensors)``, and the main process's draws at ``on_train_start`` (after SeederCallback's) to
OUT/probe_<same name>.pt.
"""

from __future__ import annotations

import gc
import os
import random
import sys

import lightning.pytorch as pl
import numpy as np
import torch

import seeder
from seeder.integrations.lightning import SeederCallback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lightning_common import SAMPLES, Net, NoisyDataset  # noqa: E402, F401 (SAMPLES: read by the test)

GLOBAL_BATCH, EPOCHS, SEED = 8, 2, 3  # 24 samples: 3 global steps an epoch


class Indexed(NoisyDataset):
    """lightning_common's augmented items (drawing from random, NumPy and torch), with their
    index."""

    def __getitem__(self, i: int):
        x, y = super().__getitem__(i)
        return x, y, i


class Recorder(Net):
    """lightning_common's module on an elastic loader of GLOBAL_BATCH samples a step; keeps the rows
    it trained."""

    def __init__(self) -> None:
        super().__init__(None)
        self.rows: list = []
        self.probe = None

    def on_train_start(self) -> None:
        """Just before the first (resumed) step, after SeederCallback's: the main process's next
        draws, put back."""
        with seeder.default_seeder().fork_rng():
            self.probe = probe()

    def training_step(self, batch, batch_idx):
        x, y, index = batch
        self.rows.append((self.current_epoch, self.global_step + 1, index.clone(), x.clone()))
        return super().training_step((x, y), batch_idx)

    def train_dataloader(self):
        return seeder.ElasticDataLoader(
            Indexed(), batch_size=GLOBAL_BATCH // self.trainer.world_size, shuffle=True
        )


def probe() -> torch.Tensor:
    """The main process's next draws from random, NumPy and torch (what dropout and the like would
    use)."""
    return torch.tensor(
        [random.random(), float(np.random.rand()), float(torch.rand(()))], dtype=torch.float64
    )


def fit(devices: int, ckpt_dir=None, ckpt_path=None):
    """One ``fit`` with the default seeder; returns the rows and the trainer."""
    seeder.init(master_seed=SEED, ngpus=devices, rank=int(os.environ.get("LOCAL_RANK", "0")))
    seeder.reseed(0, 0)
    model = Recorder()
    callbacks = [SeederCallback()]
    if ckpt_dir is not None:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=ckpt_dir, filename="{step}", every_n_train_steps=1, save_top_k=-1
            )
        )
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=ckpt_dir is not None,
        accelerator="cpu",
        deterministic=True,
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return model.rows, model.probe, trainer


def main(out: str, devices: int, tokens) -> None:
    for token in tokens:
        if token == "full":
            rows, first, trainer = fit(devices, ckpt_dir=os.path.join(out, f"ckpt{devices}"))
            name = f"full{devices}"
        else:
            saved, step = token.split(":")
            rows, first, trainer = fit(
                devices, ckpt_path=os.path.join(out, f"ckpt{saved}", f"step={step}.ckpt")
            )
            name = f"resume{saved}_{step}to{devices}"
        torch.save(rows, os.path.join(out, f"{name}_{trainer.global_rank}.pt"))
        torch.save(first, os.path.join(out, f"probe_{name}_{trainer.global_rank}.pt"))
        del rows, first, trainer
        gc.collect()  # the loaders of this fit leave the default seeder


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
    if (
        torch.distributed.is_initialized()
    ):  # a gloo group left to interpreter exit can abort the process (SIGABRT)
        torch.distributed.destroy_process_group()
