"""Child of tests/test_transformers_elastic.py: SeederTrainer(elastic=True), run under torchrun or
in the test process.

``python hf_elastic.py DIR TOKEN...``, each token in turn:

* ``full``: train EPOCHS epochs uninterrupted with a global batch of GLOBAL_BATCH samples
  (``per_device_train_batch_size = GLOBAL_BATCH // world``); at global step STOP (inside epoch 0)
  the Trainer saves DIR/full<world>/checkpoint-STOP and goes on. Rows go to
  DIR/full<world>_<rank>.pt, the trained weights' digest to DIR/digest<world>_<rank>.txt.
* ``resume<W>``: a fresh trainer on this world (:func:`resume`: ``workers`` loader workers) resumes
  DIR/full<W>/checkpoint-STOP; rows go to DIR/resume<W>to<world>_<rank>.pt, the global RNG states at
  the first resumed step to DIR/rngs<W>to<world>_<rank>.pt.

:func:`run` is one run on this world (stopped, resumed or whole), for a same-world resume in the
test's process (``run(DIR/full1, resume=True)`` resumes the checkpoint of ``full`` on one process).

A row is ``(epoch, global step, sample indices, sample tensors, loss)``, recorded by the model as it
receives them.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Optional

import numpy as np
import torch
from transformers import TrainerCallback, TrainingArguments

import seeder
from seeder.integrations.transformers import SeederTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_common import Augmented, Tiny  # noqa: E402

N, GLOBAL_BATCH, STOP, EPOCHS, SEED = 32, 8, 2, 2, 42
STEPS_PER_EPOCH = N // GLOBAL_BATCH


class Indexed(Augmented):
    """hf_common's augmented items (drawing from random, NumPy and torch), with their index."""

    def __init__(self) -> None:
        super().__init__(n=N)

    def __getitem__(self, i: int):
        return dict(super().__getitem__(i), index=i)


class Recording(Tiny):
    """hf_common's model; it records each batch it receives with the global step it trains."""

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.rows: list[tuple] = []

    def forward(self, x, labels=None, index=None):
        out = super().forward(x, labels)
        epoch = (self.step - 1) // STEPS_PER_EPOCH
        self.rows.append(
            (epoch, self.step, index.clone(), x.detach().clone(), out["loss"].detach().clone())
        )
        return out


def rng_states() -> list[torch.Tensor]:
    """The global RNGs' states (random, NumPy, torch CPU) as tensors, without drawing."""
    py = random.getstate()[1]
    return [
        torch.tensor(py, dtype=torch.int64),
        torch.from_numpy(np.random.get_state()[1].astype(np.int64)),
        torch.get_rng_state(),
    ]


class Steps(TrainerCallback):
    """Tells the model its step; saves a checkpoint at ``save_at``; keeps the RNG states at the
    first step it sees."""

    def __init__(self, model: Recording, save_at: Optional[int], stop: bool = False):
        self.model, self.save_at, self.stop = model, save_at, stop
        self.first: Optional[list[torch.Tensor]] = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.model.step = state.global_step + 1
        if self.first is None:
            self.first = rng_states()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.save_at:
            control.should_save = True
            control.should_training_stop = self.stop


def trainer(out: str, save_at: Optional[int], stop: bool = False, workers: int = 0):
    """A SeederTrainer(elastic=True) with a global batch of GLOBAL_BATCH on this world."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=GLOBAL_BATCH // world,
        num_train_epochs=EPOCHS,
        learning_rate=0.1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=workers,
        seed=SEED,
        ddp_find_unused_parameters=False,
    )
    s = seeder.Seeder()
    s.init(SEED)  # after TrainingArguments: under torchrun the process group exists
    torch.manual_seed(s.get_seed(0, 0, shared=True))  # the same initial weights on every rank
    model = Recording()
    steps = Steps(model, save_at, stop)
    t = SeederTrainer(
        model=model, args=args, train_dataset=Indexed(), callbacks=[steps], seeder=s, elastic=True
    )
    return t, model, steps, world, s.rank


def full(out: str) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    t, model, _, world, rank = trainer(os.path.join(out, f"full{world}"), STOP)
    t.train()
    torch.save(model.rows, os.path.join(out, f"full{world}_{rank}.pt"))
    with open(os.path.join(out, f"digest{world}_{rank}.txt"), "w") as f:
        f.write(seeder.digest(model))


def resume(out: str, saved: int, workers: int = 0) -> None:
    t, model, steps, world, rank = trainer(
        os.path.join(out, f"resume{saved}"), None, workers=workers
    )
    t.train(resume_from_checkpoint=os.path.join(out, f"full{saved}", f"checkpoint-{STOP}"))
    torch.save(model.rows, os.path.join(out, f"resume{saved}to{world}_{rank}.pt"))
    torch.save(steps.first, os.path.join(out, f"rngs{saved}to{world}_{rank}.pt"))


def run(out: str, stop: bool = False, resume: bool = False):
    """One run in ``out`` on this world: whole, stopped after saving at STOP, or resumed from that
    checkpoint.

    Returns the rows, the global RNG states at its first step and the trained weights' digest.
    """
    t, model, steps, _, _ = trainer(out, STOP if stop else None, stop)
    t.train(resume_from_checkpoint=os.path.join(out, f"checkpoint-{STOP}") if resume else None)
    return model.rows, steps.first, seeder.digest(model)


if __name__ == "__main__":
    for token in sys.argv[2:]:
        if token == "full":
            full(sys.argv[1])
        else:
            resume(sys.argv[1], int(token[len("resume") :]))
    if (
        torch.distributed.is_initialized()
    ):  # a gloo group left to interpreter exit can abort the process (SIGABRT)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
