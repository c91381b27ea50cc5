"""Streams through the integrations. SeederTrainer: a ``datasets`` stream with a random ``.map``; a
run stopped at a checkpoint (in the stream's first epoch or a later one, once or twice) and resumed
matches the uninterrupted run loss for loss. SeederCallback: Lightning with plain and ``datasets``
streams, 0 and 2 workers, mid-epoch and at the end."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import seeder

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "scripts"))
from optional import need  # noqa: E402
from stream_common import augment  # noqa: E402

ITEMS, BS = 40, 8  # 5 steps an epoch


def stream():
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(ITEMS, 4, generator=g)
    ds = datasets.Dataset.from_dict(
        {"feat": x.tolist(), "labels": (x.sum(1) > 0).long().tolist(), "x": list(range(ITEMS))}
    )
    return ds.to_iterable_dataset(num_shards=2).map(augment).with_format("torch")


def trainer_run(out, stop=None, resume=False, max_steps=8, workers=0):
    pytest.importorskip("transformers")
    from hf_common import Tiny
    from transformers import TrainerCallback, TrainingArguments

    from seeder.integrations.transformers import SeederTrainer

    class Model(Tiny):
        def forward(self, feat, noise, labels=None, **_):
            return super().forward(feat * (1 + 0.1 * noise[:, None]), labels)

    class Record(TrainerCallback):
        def __init__(self):
            self.losses = {}

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses[state.global_step] = logs["loss"]

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop:
                control.should_save = control.should_training_stop = True

    s = seeder.Seeder()
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=BS,
        max_steps=max_steps,
        learning_rate=0.1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=workers,
        seed=42,
        remove_unused_columns=False,
    )
    s.init(42)
    torch.manual_seed(s.get_seed(0, 0, shared=True))
    model = Model(dim=4)
    rec = Record()
    SeederTrainer(model=model, args=args, train_dataset=stream(), callbacks=[rec], seeder=s).train(
        resume_from_checkpoint=True if resume else None
    )
    return rec.losses, seeder.digest(model)


@pytest.mark.slow
def test_seeder_trainer_resumes_a_stream_bitwise_in_any_of_its_epochs(tmp_path):
    full, digest = trainer_run(str(tmp_path / "full"), max_steps=12)
    assert sorted(full) == list(
        range(1, 13)
    )  # 5 steps of stream epoch 0, 5 of epoch 1, 2 of epoch 2
    first, _ = trainer_run(str(tmp_path / "run"), stop=3, max_steps=12)
    rest, dig = trainer_run(str(tmp_path / "run"), resume=True, max_steps=12)
    assert min(rest) == 4
    assert {**first, **rest} == full and dig == digest
    # The Trainer resumes a stream with no length as "step 7 of epoch 0"; the stream stands at batch
    # 2 of its epoch 1, after 5 batches of epoch 0. Resumed there, and again from step 11 (epoch 2)
    # of the resumed run.
    first, _ = trainer_run(str(tmp_path / "late"), stop=7, max_steps=12)
    middle, _ = trainer_run(str(tmp_path / "late"), resume=True, stop=11, max_steps=12)
    rest, dig = trainer_run(str(tmp_path / "late"), resume=True, max_steps=12)
    assert (min(middle), max(middle), min(rest)) == (8, 11, 12)
    assert {**first, **middle, **rest} == full and dig == digest


@pytest.mark.slow
def test_seeder_trainer_resumes_a_stream_bitwise_with_two_workers(tmp_path):
    """The same with 2 loader workers (each reads one of the stream's 2 shards), stopped in the
    stream's second pass."""
    full, digest = trainer_run(str(tmp_path / "full"), workers=2)
    first, _ = trainer_run(str(tmp_path / "run"), stop=6, workers=2)
    rest, dig = trainer_run(str(tmp_path / "run"), resume=True, workers=2)
    assert min(rest) == 7 and {**first, **rest} == full and dig == digest


def test_a_trainer_stream_state_that_no_run_reaches_is_refused():
    pytest.importorskip("transformers")
    from seeder.integrations.transformers import _StreamEpochs as StreamEpochs

    epochs = StreamEpochs()
    for bad in (
        {"format": "seeder.trainer_stream", "version": 1, "earlier": -1},
        {"format": "seeder.trainer_stream", "version": 1, "earlier": True},
        {"format": "seeder.trainer_stream", "version": 2, "earlier": 0},
        {"format": "seeder.trainer_stream", "version": 1, "earlier": 0, "extra": 1},
    ):
        with pytest.raises(seeder.StateError):
            epochs.check_state_dict(bad)
    assert epochs.earlier == 0


# --------------------------------------------------------------------------------------------- DCP
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_dcp_resumes_a_stream_bitwise_mid_epoch(tmp_path):
    """seeder's state through torch.distributed.checkpoint (SeederStateful), a stream of 2
    workers."""
    import torch.distributed.checkpoint as dcp
    from stream_common import Counted, flat

    from seeder.integrations.dcp import SeederStateful

    def build():
        s = seeder.Seeder()
        s.init(5)
        return s, seeder.IterableDataLoader(Counted(23), batch_size=3, num_workers=2, seeder=s)

    s, loader = build()
    s.reseed(1, 0)
    it = iter(loader)
    for _ in range(3):
        next(it)
    dcp.save({"seeder": SeederStateful(s)}, checkpoint_id=str(tmp_path))
    rest = [flat(b) for b in it]
    s.reseed(1, 1)
    rest += [flat(b) for b in loader]
    t, again = build()
    dcp.load({"seeder": SeederStateful(t)}, checkpoint_id=str(tmp_path))
    assert again.batches_done == 3
    got = []
    for epoch in (0, 1):
        t.reseed(1, epoch)  # skipped for epoch 0: the loaded state continues it
        got += [flat(b) for b in again]
    assert got == rest and len(rest) == 5 + 8


# ---------------------------------------------------------------------------------------------
# Lightning
def lightning_stream_loader(workers):
    """A stream of the Lightning tests' noisy items (random, NumPy and torch draws per item),
    sharded by seeder."""
    from lightning_common import BATCH, NoisyDataset

    class Stream(torch.utils.data.IterableDataset):
        def __init__(self):
            self.items = NoisyDataset()

        def __iter__(self):
            share = seeder.data.stream_share()
            for i in range(share.index, len(self.items), share.count):
                yield self.items[i]

    return seeder.IterableDataLoader(Stream(), batch_size=BATCH, num_workers=workers)


def lightning_hf_loader(workers):
    """A shuffled ``datasets`` stream (buffer of 8) with a ``.map`` that draws, as Lightning's (x,
    y) batches."""
    from lightning_common import BATCH
    from stream_common import hf_stream

    def collate(items):
        b = torch.utils.data.default_collate(items)
        x = torch.stack(
            [
                b["x"] / 24,
                b["noise"],
                b["jitter"],
                b["r"],
                b["noise"] * b["r"],
                b["jitter"] - b["r"],
            ],
            1,
        )
        return x.float(), (b["noise"] + b["r"] > 1).float()[:, None]

    return seeder.IterableDataLoader(
        hf_stream(24, shuffle=True), batch_size=BATCH, num_workers=workers, collate_fn=collate
    )


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning:lightning", "ignore::DeprecationWarning")
@pytest.mark.parametrize(
    "workers,steps,make",
    [
        (0, [3, 6, 9], lightning_stream_loader),
        (0, [4], lightning_hf_loader),
        (2, [5], lightning_hf_loader),
    ],
    ids=["plain-0", "datasets-0", "datasets-2"],
)
def test_lightning_resumes_a_stream_bitwise_mid_epoch_and_at_its_end(
    tmp_path, workers, steps, make
):
    """Lightning fetches one batch ahead of a loader with no length, and its checkpoint would hold
    the stream's position after that batch: SeederCallback saves the position of what was trained.
    Steps 3, 5 and 9 are mid-epoch; step 6 is the epoch's last batch, taken before the stream has
    said that it ended. The ``datasets`` stream (2 workers) is shuffled through a buffer and
    augmented by a ``.map`` that draws from the global RNGs."""
    need("lightning", "SeederCallback")
    if make is lightning_hf_loader:
        need("datasets", "a datasets stream")
    import gc

    from lightning_common import run

    factory = lambda: make(workers)  # noqa: E731
    full = run(3, ckpt_dir=str(tmp_path), loader_factory=factory)
    assert [s for s, _ in full["losses"]] == list(range(1, 13))  # 6 batches an epoch, 2 epochs
    assert len({loss for _, loss in full["losses"]}) == 12
    gc.collect()
    for step in steps:
        resumed = run(3, ckpt_path=str(tmp_path / f"step={step}.ckpt"), loader_factory=factory)
        assert resumed["losses"] == full["losses"][step:], step
        assert all(torch.equal(full["weights"][k], resumed["weights"][k]) for k in full["weights"])
        gc.collect()
