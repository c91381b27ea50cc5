"""seeder.DistributedSampler: torch compatibility, shards, order from the seeder, reseed following,
O(1) resume."""

from __future__ import annotations

import io
import itertools
import math
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data
from torch.utils.data import DataLoader

import seeder
from seeder import DistributedSampler, Seeder, SeederWarning, StateError
from seeder._seeding.default import default_seeder
from seeder._seeding.derive import Domain, derive_seed
from seeder.data import SeededDataset
from seeder.data._permutation import keyed_permutation

# The sampler is iterated directly here, not through a loader: "loader not shown" is for loaders.
pytestmark = pytest.mark.filterwarnings("ignore:.*loader not shown:seeder.SeederWarning")


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


class Items(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


@pytest.fixture
def s():
    sd = Seeder()
    sd.init(1234)
    return sd


def make(n, s, **kw):
    return DistributedSampler(Sized(n), seeder=s, **kw)


def global_order(n, s, replicas, **kw):
    """Interleave all ranks' shards back into the global (padded) order."""
    shards = [list(make(n, s, num_replicas=replicas, rank=r, **kw)) for r in range(replicas)]
    return [shards[j % replicas][j // replicas] for j in range(sum(map(len, shards)))], shards


CASES = [
    (n, r, dl)
    for n in (0, 1, 2, 5, 7, 8, 9, 100, 1001, 4097)
    for r in (1, 2, 3, 8)
    for dl in (False, True)
]


# --------------------------------------------------------------------------- torch compatibility
def test_is_a_torch_distributed_sampler(s):
    sampler = make(10, s)
    assert isinstance(sampler, torch.utils.data.DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.epoch, sampler.shuffle) == (1, 0, 0, True)


@pytest.mark.parametrize("n, replicas, drop_last", CASES)
def test_torch_mode_reproduces_torch_sampler(n, replicas, drop_last, s):
    for rank in range(replicas):
        for shuffle in (True, False):
            ref = torch.utils.data.DistributedSampler(
                Sized(n), replicas, rank, shuffle=shuffle, seed=77, drop_last=drop_last
            )
            ours = make(
                n,
                s,
                num_replicas=replicas,
                rank=rank,
                shuffle=shuffle,
                seed=77,
                drop_last=drop_last,
                mode="torch",
            )
            for epoch in (0, 3):
                ref.set_epoch(epoch)
                ours.set_epoch(epoch)
                assert list(ours) == list(ref), (n, replicas, rank, shuffle, drop_last, epoch)
            assert len(ours) == len(ref) and ours.total_size == ref.total_size


@pytest.mark.parametrize("n, replicas, drop_last", CASES)
def test_unshuffled_feistel_mode_equals_torch(n, replicas, drop_last, s):
    for rank in range(replicas):
        ref = torch.utils.data.DistributedSampler(
            Sized(n), replicas, rank, shuffle=False, drop_last=drop_last
        )
        assert list(
            make(n, s, num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        ) == list(ref)


@pytest.mark.parametrize("n, replicas, drop_last", CASES)
@pytest.mark.parametrize("mode", ["feistel", "torch"])
def test_shards_disjoint_and_cover_with_torch_padding(n, replicas, drop_last, mode, s):
    order, shards = global_order(n, s, replicas, drop_last=drop_last, mode=mode)
    ref = torch.utils.data.DistributedSampler(Sized(n), replicas, 0, drop_last=drop_last)
    assert all(len(sh) == ref.num_samples for sh in shards)
    assert len(order) == ref.total_size
    if n == 0:
        return
    # Global order: a permutation of range(n), then (without drop_last) its own head as padding.
    distinct = min(n, ref.total_size)
    head = order[:distinct]
    assert len(set(head)) == distinct and set(head) <= set(range(n))
    if not drop_last:
        assert set(head) == set(range(n))
        assert order[n:] == [head[j % n] for j in range(ref.total_size - n)]


def test_order_identical_on_all_ranks_and_runs():
    def run(master):
        sd = Seeder()
        sd.init(master)
        sd.reseed(1, 2)
        return global_order(1000, sd, 4)[0]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_different_every_epoch_and_not_seed_plus_epoch_arithmetic():
    def order(master, epoch, mode):
        sd = Seeder()
        sd.init(master)
        sampler = DistributedSampler(Sized(5000), seeder=sd, mode=mode)
        sampler.set_epoch(epoch)
        return list(sampler)

    for mode in ("feistel", "torch"):
        assert order(10, 0, mode) != order(10, 1, mode)
        assert order(10, 1, mode) != order(
            11, 0, mode
        )  # torch's sampler: seed s, epoch e+1 == seed s+1, epoch e
    t = [torch.utils.data.DistributedSampler(Sized(5000), 1, 0, seed=seed) for seed in (10, 11)]
    t[0].set_epoch(1)
    assert list(t[0]) == list(t[1])  # the torch behaviour the test above rules out


def test_key_is_the_sampler_domain_shared_by_all_ranks(s):
    sampler = make(10, s, num_replicas=4, rank=3)
    sampler.set_epoch(5)
    assert sampler.state_dict()["key"] == derive_seed(1234, Domain.SAMPLER, 1, 5, 0, 0)
    other = make(10, s, num_replicas=4, rank=3, stream=1)
    other.set_epoch(5)
    assert other.state_dict()["key"] == derive_seed(1234, Domain.SAMPLER, 1, 5, 0, 1)
    fixed = make(10, s, seed=99)
    assert fixed.state_dict()["key"] == derive_seed(99, Domain.SAMPLER, 1, 0, 0, 0)


def test_explicit_seed_needs_no_seeder():
    sd = Seeder()  # not initialised
    assert sorted(DistributedSampler(Sized(50), seed=3, seeder=sd)) == list(range(50))
    with pytest.raises(RuntimeError, match="seeder.init"):
        iter(DistributedSampler(Sized(50), seeder=sd))


def test_without_process_group_one_replica(fresh_default):
    fresh_default.init(3)
    sampler = seeder.DistributedSampler(Sized(10))
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (1, 0, 10)
    assert sorted(sampler) == list(range(10))


# --------------------------------------------------------------------------- following reseed
def test_follows_reseed_of_its_task_until_set_epoch(s):
    sampler = make(100, s)
    s.reseed(0, 0)
    assert sampler.epoch == 0
    s.reseed(1, 4)
    assert sampler.epoch == 4
    s.reseed(0, 9)  # another task: ignored
    assert sampler.epoch == 4
    first = list(sampler)
    s.reseed(1, 5)
    assert sampler.epoch == 5 and list(sampler) != first
    sampler.set_epoch(2)  # explicit wins from now on
    s.reseed(1, 6)
    assert sampler.epoch == 2
    other_task = make(100, s, task=7)
    s.reseed(7, 3)
    assert other_task.epoch == 3 and sampler.epoch == 2


def test_created_after_reseed_starts_at_that_epoch(s):
    s.reseed(1, 6)
    assert make(10, s).epoch == 6
    s.reseed(0, 0)
    assert (
        make(10, s).epoch == 0
    )  # the last reseed is another task's: start at 0 until reseed(1, e)


def test_default_seeder_attaches(fresh_default):
    fresh_default.init(8)
    sampler = seeder.DistributedSampler(Sized(10))
    assert sampler in default_seeder().participants()
    fresh_default.reseed(1, 3)
    assert sampler.epoch == 3
    del sampler
    assert not [p for p in default_seeder().participants() if isinstance(p, DistributedSampler)]


# --------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kw, exc, msg",
    [
        ({"rank": -1, "num_replicas": 2}, ValueError, "Invalid rank -1"),
        ({"rank": 2, "num_replicas": 2}, ValueError, r"\[0, 1\]"),
        ({"num_replicas": 0}, ValueError, "num_replicas"),
        ({"num_replicas": 2.0}, TypeError, "num_replicas"),
        ({"rank": "0"}, TypeError, "rank"),
        ({"mode": "fast"}, ValueError, "mode"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"shuffle": 1}, TypeError, "shuffle"),
        ({"drop_last": None}, TypeError, "drop_last"),
        ({"task": -1}, ValueError, "task"),
        ({"with_epoch": "yes"}, TypeError, "with_epoch"),
        ({"seeder": object()}, TypeError, "Seeder"),
    ],
)
def test_bad_arguments(kw, exc, msg, s):
    kw.setdefault("seeder", s)
    with pytest.raises(exc, match=msg):
        DistributedSampler(Sized(10), **kw)


def test_dataset_without_len(s):
    with pytest.raises(TypeError, match="__len__"):
        DistributedSampler(iter(range(3)), seeder=s)


def test_bad_set_epoch_changes_nothing(s):
    sampler = make(10, s)
    sampler.set_epoch(3)
    for bad, exc in ((-1, ValueError), (2**32, ValueError), (1.0, TypeError), (None, TypeError)):
        with pytest.raises(exc):
            sampler.set_epoch(bad)
        assert sampler.epoch == 3


# --------------------------------------------------------------------------- state and resume
def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


RESUME = [
    (n, r, rank, dl)
    for n in (10, 97, 5000)
    for r in (1, 3)
    for rank in {0, r - 1}
    for dl in (False, True)
]


@pytest.mark.parametrize("mode", ["feistel", "torch"])
@pytest.mark.parametrize("n, replicas, rank, drop_last", RESUME)
def test_resume_at_start_middle_last_and_end(mode, n, replicas, rank, drop_last, s):
    kw = dict(num_replicas=replicas, rank=rank, drop_last=drop_last, mode=mode)
    s.reseed(1, 2)
    full = list(make(n, s, **kw))
    for pos in sorted({0, 1, len(full) // 2, len(full) - 1, len(full)}):
        a = make(n, s, **kw)
        it = iter(a)
        got = list(itertools.islice(it, pos))
        a.advance(pos)
        state = roundtrip(a.state_dict())
        assert (state["epoch"], state["position"]) == (2, pos)
        b = make(n, s, **kw)
        b.load_state_dict(state)
        assert got + list(b) == full, (pos,)
        assert list(b) == full  # only the first iteration after a load resumes
    # At the epoch boundary the resumed epoch is empty and the next one is whole.
    end = make(n, s, **kw)
    end.load_state_dict({**a.state_dict(), "position": len(full)})
    assert list(end) == []
    s.reseed(1, 3)
    assert len(list(end)) == len(full) and end.consumed == 0


def test_resume_is_o1_at_huge_n(s):
    n = 10**15  # iterating the consumed part would take days
    a = make(n, s, num_replicas=8, rank=5)
    state = a.state_dict()
    state["position"] = len(a) - 3
    b = make(n, s, num_replicas=8, rank=5)
    t0 = time.perf_counter()
    b.load_state_dict(state)
    tail = list(iter(b))  # list(b) would preallocate len(b) slots
    assert time.perf_counter() - t0 < 2.0
    assert len(tail) == 3 and all(0 <= i < n for i in tail)
    # Same values as a fresh iteration would give there: evaluate those positions directly.
    perm = keyed_permutation(n, state["key"])
    pos = np.array([(len(a) - 3 + j) * 8 + 5 for j in range(3)], dtype=np.int64)
    assert tail == perm(pos).tolist()


def test_state_holds_plain_values_and_loads_weights_only(s):
    sampler = make(100, s, num_replicas=2, rank=1)
    state = sampler.state_dict()
    assert all(isinstance(v, (int, str, bool)) for v in state.values())
    assert roundtrip(state) == state


def test_a_state_from_another_master_seed_is_refused_and_its_own_seed_resumes_it(s):
    a = make(200, s)
    full = list(a)
    a.advance(50)
    state = a.state_dict()
    other = Seeder()
    other.init(999)
    b = DistributedSampler(Sized(200), seeder=other)
    with pytest.raises(
        StateError, match="not the shuffle key of epoch 0"
    ):  # its next epochs would diverge
        b.load_state_dict(state)
    other.init(s.get_master_seed())
    b.load_state_dict(state)
    assert list(b) == full[50:]


@pytest.mark.parametrize(
    "change, msg",
    [
        ({"dataset_len": 101}, "dataset of length 101"),
        ({"num_replicas": 4}, "num_replicas= 4"),
        ({"mode": "torch"}, "mode= 'torch'"),
        ({"shuffle": False}, "shuffle="),
        ({"drop_last": True}, "drop_last="),
        ({"task": 2}, "task="),
        ({"position": 51}, r"\[0, 50\]"),
        ({"position": -1}, "position"),
        ({"epoch": -1}, "epoch"),
        ({"key": 2**64}, "key"),
        ({"version": 99}, "version"),
        ({"format": "seeder"}, "not a sampler state"),
        ({"extra": 1}, "unexpected"),
    ],
)
def test_bad_state_raises_and_changes_nothing(change, msg, s):
    a = make(100, s, num_replicas=2, rank=0)
    full = list(a)
    a.advance(20)
    good = a.state_dict()
    b = make(100, s, num_replicas=2, rank=0)
    b.set_epoch(4)
    before = b.state_dict()
    with pytest.raises(StateError, match=msg):
        b.load_state_dict({**good, **change})
    assert b.state_dict() == before
    b.set_epoch(0)
    assert list(b) == full
    with pytest.raises(StateError):
        b.load_state_dict({k: v for k, v in good.items() if k != "key"})


def test_state_from_another_world_size_or_dataset(s):
    state = make(100, s, num_replicas=2, rank=0).state_dict()
    with pytest.raises(StateError, match="num_replicas"):
        make(100, s, num_replicas=3, rank=0).load_state_dict(state)
    with pytest.raises(StateError, match="dataset of length 100"):
        make(99, s, num_replicas=2, rank=0).load_state_dict(state)


def test_state_of_rank_0_loads_on_every_rank(s):
    # The position is shared by all ranks, so a checkpoint written by rank 0 serves them all.
    ref = [list(make(100, s, num_replicas=4, rank=r)) for r in range(4)]
    a = make(100, s, num_replicas=4, rank=0)
    list(itertools.islice(iter(a), 10))
    a.advance(10)
    for r in range(4):
        b = make(100, s, num_replicas=4, rank=r)
        b.load_state_dict(a.state_dict())
        assert list(b) == ref[r][10:]


def test_advance_errors_and_warning(s):
    sampler = make(10_000, s)
    loader = torch.utils.data.DataLoader(range(10_000), sampler=sampler)
    seeder.data.watch_loader(loader)  # shown (and kept): nothing else to say
    it = iter(sampler)
    for bad in (-1, 1.5, None):
        with pytest.raises(ValueError, match="advance"):
            sampler.advance(bad)
    next(it)
    with pytest.warns(SeederWarning, match="advance"):
        assert sampler.state_dict()["position"] == 0
    with pytest.raises(ValueError, match="handed out"):
        sampler.advance(10_001)
    sampler.advance(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sampler.state_dict()["position"] == 1
    assert sampler.consumed == 1 and loader.sampler is sampler


def test_set_epoch_keeps_loaded_position_only_for_the_same_epoch(s):
    a = make(100, s)
    a.set_epoch(3)
    full = list(a)
    a.advance(30)
    state = a.state_dict()
    b = make(100, s)
    b.load_state_dict(state)
    b.set_epoch(3)  # the usual loop calls set_epoch(epoch) after resuming: keep the position
    assert list(b) == full[30:]
    b.load_state_dict(state)
    b.set_epoch(4)  # another epoch: start it from the beginning
    assert len(list(b)) == 100


def test_seeder_state_dict_carries_the_sampler(s):
    s.reseed(1, 1)
    sampler = make(300, s, num_replicas=2, rank=0)
    full = list(sampler)
    it = iter(sampler)
    list(itertools.islice(it, 40))
    sampler.advance(40)
    state = roundtrip(s.state_dict())
    assert state["participants"]["sampler.0"]["position"] == 40

    fresh = Seeder()
    fresh.init(1234)
    resumed = DistributedSampler(Sized(300), num_replicas=2, rank=0, seeder=fresh)
    fresh.load_state_dict(state)
    fresh.reseed(1, 1)  # skipped by the seeder: it continues the loaded epoch
    assert resumed.epoch == 1 and list(resumed) == full[40:]
    bad = roundtrip(s.state_dict())
    bad["participants"]["sampler.0"]["dataset_len"] = 7
    before = fresh.state_dict()
    with pytest.raises(StateError, match="dataset of length 7"):
        fresh.load_state_dict(bad)
    assert roundtrip(fresh.state_dict()).keys() == before.keys()


def test_with_epoch_pairs_over_a_seeded_dataset(s):
    ds = SeededDataset(Items(10), seeder=s)
    sampler = DistributedSampler(ds, seeder=s)
    s.reseed(1, 3)
    pairs = list(sampler)
    assert sorted(pairs) == [(3, i) for i in range(10)]
    assert all(isinstance(i, int) for i in DistributedSampler(ds, seeder=s, with_epoch=False))


# --------------------------------------------------------------------------- real DataLoaders
def train(sampler, loader, steps=None):
    seen = []
    for batch in loader:
        seen.extend(batch.tolist())
        sampler.advance(len(batch))
        if steps is not None and len(seen) >= steps:
            break
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_resume_counts_consumed_not_prefetched(workers, s):
    n, bs = 400, 8
    ds = Items(n)
    s.reseed(1, 0)

    def loader_for(sampler):
        return DataLoader(
            ds,
            batch_size=bs,
            sampler=sampler,
            num_workers=workers,
            prefetch_factor=4 if workers else None,
        )

    ref_sampler = DistributedSampler(ds, seeder=s)
    full = train(ref_sampler, loader_for(ref_sampler))
    assert sorted(full) == list(range(n))
    for stop_batches in (1, 13, n // bs - 1, n // bs):
        a = DistributedSampler(ds, seeder=s)
        loader = loader_for(a)
        seen = []
        it = iter(loader)
        for _ in range(stop_batches):
            batch = next(it)
            seen.extend(batch.tolist())
            a.advance(len(batch))
        if workers and stop_batches < n // bs - 4:
            assert a._handed > a.consumed  # the DataLoader has pulled ahead of training
        state = roundtrip(a.state_dict())
        del it
        b = DistributedSampler(ds, seeder=s)
        b.load_state_dict(state)
        assert seen + train(b, loader_for(b)) == full, stop_batches


# --------------------------------------------------------------------------- real ranks
@pytest.mark.slow
def test_torchrun_two_ranks_gloo():
    from helpers import json_lines, torchrun

    n, master = 103, 4242
    procs = torchrun(["tests/scripts/sampler_ranks.py", str(master), str(n)], nproc=2)
    rows = json_lines(procs[0].stdout, "SAMPLER ")
    assert sorted((r["rank"], r["epoch"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    ref = Seeder()
    ref.init(master)
    by_epoch = {}
    for r in rows:
        assert r["world"] == 2
        assert r["resumed"] == r["shard"]  # resumed from rank 0's state at position 5
        expected = DistributedSampler(Sized(n), num_replicas=2, rank=r["rank"], seeder=ref)
        expected.set_epoch(r["epoch"])
        assert r["shard"] == list(expected)  # same order as computed in one process
        by_epoch.setdefault(r["epoch"], {})[r["rank"]] = r["shard"]
    for _epoch, shards in by_epoch.items():
        assert len(shards[0]) == len(shards[1]) == math.ceil(n / 2)
        both = shards[0] + shards[1]
        assert set(both) == set(range(n)) and len(both) == n + 1  # one padded duplicate
    assert by_epoch[0] != by_epoch[1]
