"""Elastic seeder.DataLoader under torchrun: the same samples whatever the world size, and a
mid-epoch resume on another.

Uninterrupted runs on 2 ranks (0 workers) and 1 rank (2 workers; the 1-rank runs in the test's
process), each saving a checkpoint inside epoch 0, then resumes 2 -> 1 (2 workers), 1 -> 2 and 2 ->
2 (1 worker; 2 -> 1 and one 2 -> 2 through torch.distributed.checkpoint, torchtitan's way: seeder,
model and optimizer in one ``dcp.save``). Every sample's tensor (its augmentation draws from random,
NumPy, torch and a registered Generator) is compared bit for bit with the uninterrupted run's, and
on another world size each rank's first draws in the training loop are its re-derived streams'; the
model and optimizer that ``dcp.load`` gives are the saved ones. (4 ranks, and 4 -> 2 with a change
of workers: tests/test_accelerate_elastic.py.)
"""

from __future__ import annotations

import importlib.util
import random
from collections import Counter

import numpy as np
import pytest
import torch
import torch.distributed as dist
from helpers import REPO_ROOT, free_port, torchrun

import seeder
from seeder._state.world import rederive_streams

SCRIPT = "tests/scripts/elastic_ranks.py"
_spec = importlib.util.spec_from_file_location("elastic_ranks", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]


def samples(paths):
    """``{(epoch, index): tensor}`` and the multiset of ``(epoch, index)`` over every rank's
    rows."""
    got, count = {}, Counter()
    for path in paths:
        for epoch, _, batch, _, _ in torch.load(path, weights_only=True):
            for row in batch:
                key = (epoch, int(row[0]))
                got[key] = row
                count[key] += 1
    return got, count


def rederived_draws(checkpoint, rank: int, world: int):
    """The training loop's first draws on rank ``rank`` of ``world`` after loading ``checkpoint``
    from another world: those of the streams re-derived at the checkpoint's global step."""
    entry = torch.load(checkpoint, weights_only=True)
    with seeder.Seeder().fork_rng():
        s = seeder.Seeder()
        s.init(child.SEED, ngpus=world, rank=rank)
        rederive_streams(entry, s, child.STOP + 1)
        return torch.tensor([random.random(), float(np.random.rand())]), torch.rand(2)


def before_stop(paths):
    """The samples the run had trained when its checkpoint was saved (epoch 0, steps 0..STOP)."""
    count = Counter()
    for path in paths:
        for epoch, step, batch, _, _ in torch.load(path, weights_only=True):
            if epoch == 0 and step <= child.STOP:
                count.update((0, int(row[0])) for row in batch)
    return count


def one_rank(monkeypatch, *args) -> None:
    """The child's ``main`` on a world of one rank, in this process (its gloo group on 127.0.0.1,
    destroyed after)."""
    with monkeypatch.context() as env:
        for name, value in (
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", str(free_port())),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("LOCAL_RANK", "0"),
        ):
            env.setenv(name, value)
        with seeder.Seeder().fork_rng():
            try:
                child.main(*args)
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()


@pytest.mark.slow
def test_elastic_resume_on_other_world_sizes_and_worker_counts(tmp_path, monkeypatch):
    out = str(tmp_path)
    one_rank(monkeypatch, out, 2, 2, [])  # 1 rank, 2 workers
    # 2 ranks, 0 workers; then 1 worker: 1 -> 2, 2 -> 2 through torch.distributed.checkpoint and
    # through torch.save
    torchrun([SCRIPT, out, "0", "1", "1", "2d", "2"], nproc=2)
    one_rank(
        monkeypatch, out, None, 2, ["2", "2d"]
    )  # 2 -> 1 ranks (0 -> 2 workers), torch.save and DCP

    every = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.N)})
    ref, count = samples([tmp_path / f"full2_{r}.pt" for r in range(2)])
    assert count == every
    other, count = samples(
        [tmp_path / "full1_0.pt"]
    )  # the same data, bit for bit, whatever the world size
    assert count == every and all(torch.equal(other[k], ref[k]) for k in every)
    assert (
        len({ref[(0, i)][1].item() for i in range(child.N)}) == child.N
    )  # the augmentation draws differ per sample

    for tag, now in (("2", 1), ("2d", 1), ("1", 2), ("2d", 2), ("2", 2)):
        saved = int(tag.rstrip("d"))
        trained = before_stop([tmp_path / f"full{saved}_{r}.pt" for r in range(saved)])
        assert sum(trained.values()) == (child.STOP + 1) * child.GLOBAL_BATCH
        resumed, count = samples([tmp_path / f"resume{tag}to{now}_{r}.pt" for r in range(now)])
        assert trained + count == every, (
            saved,
            now,
        )  # every sample of the epoch once: none lost, none repeated
        assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, now)
        if (
            saved != now
        ):  # the training loop's streams at the first resumed step: re-derived for each new rank
            for r in range(now):
                first = torch.load(tmp_path / f"resume{tag}to{now}_{r}.pt", weights_only=True)[0]
                expected = rederived_draws(tmp_path / f"ckpt{saved}_0.pt", r, now)
                assert torch.equal(first[3], expected[0]) and torch.equal(first[4], expected[1]), (
                    tag,
                    now,
                    r,
                )

    # dcp.load gives every rank the model and optimizer the ranks had saved (the same on every
    # saving rank).
    for saved, now in ((2, 1), (2, 2)):
        weights = [
            torch.load(tmp_path / f"weights{saved}_{r}.pt", weights_only=True) for r in range(saved)
        ]
        assert all(torch.equal(a, b) for w in weights[1:] for a, b in zip(w, weights[0]))
        assert any(w.abs().sum() > 0 for w in weights[0][2:])  # momentum buffers that were trained
        for r in range(now):
            loaded = torch.load(tmp_path / f"loaded{saved}dto{now}_{r}.pt", weights_only=True)
            assert all(torch.equal(a, b) for a, b in zip(loaded, weights[0])), (saved, now, r)

    # The same world size: every rank's rows, the training loop's own draws included, continue bit
    # for bit.
    for r, tag in ((0, "2"), (1, "2"), (0, "2d"), (1, "2d")):
        full = torch.load(tmp_path / f"full2_{r}.pt", weights_only=True)
        again = torch.load(tmp_path / f"resume{tag}to2_{r}.pt", weights_only=True)
        tail = [row for row in full if (row[0], row[1]) > (0, child.STOP)]
        assert len(again) == len(tail) > 0
        for a, b in zip(again, tail):
            assert a[:2] == b[:2] and all(torch.equal(x, y) for x, y in zip(a[2:], b[2:]))
