"""The transformers "Fine-tune a pretrained model" Trainer tutorial, small and offline, ported to
seeder.

The tutorial's shape: a dataset of reviews, a tokenize function mapped over it, small train and
eval subsets (``shuffle(seed=42).select(...)``), a sequence classifier with 5 labels,
``TrainingArguments(output_dir="test_trainer", eval_strategy="epoch")``, an accuracy
``compute_metrics``, ``Trainer(...)`` and ``trainer.train()``; no argument parser, 3 epochs (the
Trainer's default). Here the reviews are generated text, the tokenizer a word list and the model a
1-layer BERT built from its config, so nothing is downloaded; ``report_to=[]``, ``use_cpu=True``
and ``disable_tqdm=True`` keep a test run quiet. The port to seeder is the 5 lines marked
``# seeder``; none of them is for ``seeder verify``, which drives it through seeder's variables.
"""

import numpy as np
from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

import seeder  # seeder
from seeder.integrations.transformers import SeederTrainer  # seeder

seeder.init()  # seeder: $SEEDER_SEED, else drawn and printed

WORDS = [
    "bad",
    "poor",
    "meh",
    "okay",
    "fine",
    "good",
    "great",
    "superb",
    "food",
    "staff",
    "place",
    "the",
    "was",
]
rows = np.random.default_rng(2024).integers(0, 5, size=160)  # review stars, 0-4
texts = [f"the food was {WORDS[r]} the staff {WORDS[r + 3]}" for r in rows]
dataset = Dataset.from_dict({"text": texts, "label": rows.tolist()}).train_test_split(
    test_size=0.25, seed=0
)
vocab = {w: i + 2 for i, w in enumerate(WORDS)}  # 0: padding, 1: [CLS]


def tokenize_function(examples):
    ids = [[1] + [vocab[w] for w in t.split()][:15] for t in examples["text"]]
    return {
        "input_ids": [x + [0] * (16 - len(x)) for x in ids],
        "attention_mask": [[1] * len(x) + [0] * (16 - len(x)) for x in ids],
    }


tokenized_datasets = dataset.map(tokenize_function, batched=True)
small_train_dataset = tokenized_datasets["train"].shuffle(seed=42).select(range(64))
small_eval_dataset = tokenized_datasets["test"].shuffle(seed=42).select(range(16))

seeder.reseed(0, 0)  # seeder: the initial weights
config = BertConfig(
    vocab_size=len(vocab) + 2,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
    num_labels=5,
)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    predictions = np.argmax(logits, axis=-1)
    return {"accuracy": float((predictions == labels).mean())}


training_args = TrainingArguments(
    output_dir="test_trainer", eval_strategy="epoch", report_to=[], use_cpu=True, disable_tqdm=True
)
trainer = SeederTrainer(  # seeder: Trainer(
    model=model,
    args=training_args,
    train_dataset=small_train_dataset,
    eval_dataset=small_eval_dataset,
    compute_metrics=compute_metrics,
)

trainer.train()
