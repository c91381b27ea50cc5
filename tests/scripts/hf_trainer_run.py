"""One SeederTrainer run (single process or a torchrun rank): prints 'RESULT <json>' with per-step
losses and the digest.

python hf_trainer_run.py OUT STOP   (the full run, a run stopped at STOP, its resume)
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from hf_common import Augmented, Tiny  # noqa: E402
from transformers import TrainerCallback, TrainingArguments  # noqa: E402

import seeder  # noqa: E402
from seeder.integrations.transformers import SeederTrainer  # noqa: E402


class Record(TrainerCallback):
    """Per-step losses (logging_steps=1) and a save plus stop at ``stop``."""

    def __init__(self, stop):
        self.stop, self.losses = stop, {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses[state.global_step] = logs["loss"]

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop is not None and state.global_step == self.stop:
            control.should_save = control.should_training_stop = True


def run(out: str, stop=None, resume=False, seeder_obj=None, epochs: int = 2, workers: int = 2):
    s = seeder_obj or seeder.Seeder()
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=8,
        num_train_epochs=epochs,
        learning_rate=0.1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=workers,
        seed=42,
        ddp_find_unused_parameters=False,
    )
    s.init(42)  # after TrainingArguments: under torchrun the process group exists
    torch.manual_seed(s.get_seed(0, 0, shared=True))  # the same initial weights on every rank
    model = Tiny()
    rec = Record(stop)
    trainer = SeederTrainer(
        model=model, args=args, train_dataset=Augmented(), callbacks=[rec], seeder=s
    )
    trainer.train(resume_from_checkpoint=True if resume else None)
    return rec.losses, seeder.digest(model)


if __name__ == "__main__":
    # python hf_trainer_run.py OUT STOP: the full run, then a run stopped at STOP, then its resume,
    # in one process
    out, stop = sys.argv[1], int(sys.argv[2])
    results = [
        run(os.path.join(out, "full")),
        run(os.path.join(out, "run"), stop=stop),
        run(os.path.join(out, "run"), resume=True),
    ]
    if int(os.environ.get("RANK", "0")) == 0:
        os.write(1, ("RESULT " + json.dumps(results) + "\n").encode())
    if (
        torch.distributed.is_initialized()
    ):  # a gloo group left to interpreter exit can abort the process (SIGABRT)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
