"""SeederAccelerator over a seeder.IterableDataLoader: 1 process, and 2 (torchrun, gloo, loopback).

Accelerate prepares a loader over an ``IterableDataset`` as a ``DataLoaderDispatcher``: a new torch
DataLoader over the bare dataset with the loader's ``collate_fn`` (seeder's, which keeps the batch
its workers collated), iterated on rank 0 only and split across ranks. Over seeder's stream that
fails at the first batch, and would bypass seeder's shares, per-batch seeds and position if it did
not. SeederAccelerator keeps the loader: each rank iterates its own share;
``save_state``/``load_state`` in the middle of epoch 0 resume bit for bit (every batch, loss and the
final weights of the uninterrupted run), and accelerate's gradient state marks exactly the last
batch of each epoch.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("accelerate")

from helpers import REPO_ROOT, torchrun  # noqa: E402

import seeder  # noqa: E402

pytestmark = pytest.mark.xdist_group("accelerate_streams")  # one worker builds the module's runs

SCRIPT = "tests/scripts/stream_accelerate.py"
_spec = importlib.util.spec_from_file_location("stream_accelerate", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]


class Items(torch.utils.data.IterableDataset):
    def __iter__(self):
        share = seeder.data.stream_share()
        return iter(torch.arange(16.0)[share.index :: share.count])


def test_prepare_keeps_the_stream_loader_and_yields_its_batches():
    """16 items, batch 2: prepared, the loader yields its 8 batches (a dispatcher raised)."""
    from seeder.integrations.accelerate import PreparedLoader, SeederAccelerator

    s = seeder.Seeder()
    acc = SeederAccelerator(cpu=True, seeder=s)
    s.init(3)
    s.reseed(1, 0)
    loader = seeder.IterableDataLoader(Items(), batch_size=2, seeder=s)
    prepared = acc.prepare(loader)
    assert isinstance(prepared, PreparedLoader) and prepared.loader is loader
    assert prepared.total_batch_size == 2
    got, flags = [], []
    for batch in prepared:
        got.append(batch.tolist())
        flags.append(acc.gradient_state.end_of_dataloader)
        assert loader.state_dict()["batch"] == len(got)  # the look-ahead is not in the position
    assert got == [[float(2 * i), float(2 * i + 1)] for i in range(8)]
    assert flags == [False] * 7 + [True]
    prepared.set_epoch(1)
    assert loader.epoch == 1


def test_a_resumed_prepared_stream_marks_the_last_batch_and_skips_in_o1(tmp_path):
    from seeder.integrations.accelerate import (
        SeederAccelerator,
        load_checkpoint_state,
        save_checkpoint_state,
    )

    s = seeder.Seeder()
    acc = SeederAccelerator(cpu=True, seeder=s)
    s.init(3)
    s.reseed(1, 0)
    loader = seeder.IterableDataLoader(Items(), batch_size=2, num_workers=2, seeder=s)
    prepared = acc.prepare(loader)
    it = iter(prepared)
    want = [next(it).tolist() for _ in range(3)]
    save_checkpoint_state(str(tmp_path), s)
    want += [b.tolist() for b in it]
    load_checkpoint_state(str(tmp_path), s)
    assert acc.skip_first_batches(prepared, 3) is prepared
    got, flags = [], []
    for batch in prepared:
        got.append(batch.tolist())
        flags.append(acc.gradient_state.end_of_dataloader)
    assert got == want[3:] and flags == [False] * 4 + [True]


def check(out, world):
    """Resumed rows and weights are the uninterrupted run's; each epoch's items are each rank's
    share, every item once over the ranks; only the epoch's last batch is flagged."""
    steps = child.N // child.BATCH // world
    for rank in range(world):
        full, digest = torch.load(out / f"full{world}_{rank}.pt", weights_only=True)
        resumed, again = torch.load(out / f"resume{world}_{rank}.pt", weights_only=True)
        want = [(e, s) for e in range(child.EPOCHS) for s in range(steps)]
        assert [(e, s) for e, s, *_ in full] == want
        assert [r[5] for r in full] == ([False] * (steps - 1) + [True]) * child.EPOCHS
        rest = full[child.STOP + 1 :]
        assert len(resumed) == len(rest)
        for a, b in zip(resumed, rest):
            assert a[:2] == b[:2] and a[5] == b[5]
            assert all(torch.equal(x, y) for x, y in zip(a[2:5], b[2:5])), a[:2]
        assert again == digest
    for epoch in range(child.EPOCHS):
        rows = [
            r
            for rank in range(world)
            for r in torch.load(out / f"full{world}_{rank}.pt", weights_only=True)[0]
        ]
        items = [int(i) for e, _, index, *_ in rows if e == epoch for i in index]
        assert sorted(items) == list(range(child.N))


@pytest.mark.slow
def test_one_process_resumes_bitwise_with_two_workers(tmp_path):
    with seeder.Seeder().fork_rng():
        child.main(str(tmp_path), 2, ["full", "resume"])
    check(tmp_path, 1)


@pytest.mark.slow
def test_two_processes_resume_bitwise_each_on_its_share(tmp_path):
    torchrun([SCRIPT, str(tmp_path), "0", "full", "resume"], nproc=2, frameworks=True)
    check(tmp_path, 2)
