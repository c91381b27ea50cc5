#!/usr/bin/env python
"""A transformers Trainer script that prepares its data with ``datasets``, made exact with seeder.

Shaped like the Trainer tutorial: a ``datasets.Dataset`` is built, preprocessed with ``map``
and split with ``train_test_split``; a small randomly initialised model is trained by the
Trainer and evaluated::

    python examples/hf_datasets_train.py
    SEEDER_SEED=42 python examples/hf_datasets_train.py         # replay a run
    seeder verify -- python examples/hf_datasets_train.py

What seeder needs here: ``seeder.init()`` and ``seeder.reseed(0, 0)`` after ``TrainingArguments``
and before the data are prepared (the split draws randomness: it gets a seed derived from the
master seed, the same on every rank), and ``SeederTrainer`` in place of ``Trainer``. Under
``seeder verify`` the Trainer's own checkpoints (in ``output_dir``) carry the stops and resumes.
"""

import datasets
import torch
from transformers import TrainingArguments

import seeder
from seeder.integrations.transformers import SeederTrainer


class Classifier(torch.nn.Module):
    def __init__(self, features: int = 8, classes: int = 3):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(features, 32),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.1),
            torch.nn.Linear(32, classes),
        )

    def forward(self, features, labels=None):
        logits = self.net(features)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def prepare(n: int = 120) -> datasets.DatasetDict:
    """A fixed table (like a downloaded dataset), preprocessed, then split at random (seeded by
    seeder)."""
    table = datasets.Dataset.from_dict(
        {"text": [f"item {i} " * (1 + i % 5) for i in range(n)], "label": [i % 3 for i in range(n)]}
    )
    table = table.map(
        lambda ex: {
            "features": [float(len(ex["text"])) / 40.0, float(ex["text"].count(" ")) / 10.0]
            + [float((ord(c) % 7) / 7.0) for c in ex["text"][:6]],
            "labels": ex["label"],
        }
    )
    split = table.train_test_split(test_size=0.2, seed=seeder.get_seed(0, 0, shared=True) % 2**32)
    return split.with_format("torch", columns=["features", "labels"])


def main() -> None:
    args = TrainingArguments(
        output_dir="hf_datasets_out",
        num_train_epochs=3,
        per_device_train_batch_size=8,
        learning_rate=0.05,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        logging_steps=4,
        log_level="warning",
    )
    # after TrainingArguments (it starts the process group); $SEEDER_SEED, else drawn and printed
    seeder.init()
    seeder.reseed(0, 0)  # before anything random: the split, then the initial weights
    data = prepare()
    trainer = SeederTrainer(
        model=Classifier(), args=args, train_dataset=data["train"], eval_dataset=data["test"]
    )
    trainer.train()
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
