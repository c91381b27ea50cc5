"""Worker seeding, per-sample seeds and the DataLoader generator, with real DataLoader workers."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import seeder
from seeder import DistributedSampler, Seeder
from seeder._seeding.derive import (
    MAX_KEY,
    MAX_MASTER_SEED,
    Domain,
    derive_seed,
    index_words,
    numpy_seed,
    stream_seeds,
)
from seeder.data import SeededDataset, WorkerInitFn, make_worker_init_fn, sample_seed

MASTER = 20240601
# Several tests replay an epoch on purpose (reference runs); the seeder warns about that.
pytestmark = pytest.mark.filterwarnings(
    "ignore:seeder.reseed.*already called:seeder.SeederWarning",
    "ignore:This DataLoader will create:UserWarning",
)


# Module-level datasets: spawned workers import them from this module.
class Draws(torch.utils.data.Dataset):
    """Each item: index, worker id, and one draw from every RNG a dataset may use."""

    def __init__(self, n=16):
        self.n = n
        self.member = random.Random(0)  # the copied-into-workers member RNG of the issue
        self.np_member = np.random.default_rng(0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return (
            i,
            -1 if info is None else info.id,
            random.random(),
            float(np.random.random()),
            float(torch.rand(())),
            self.member.random(),
            float(self.np_member.random()),
        )


def rows(loader):
    out = []
    for batch in loader:
        out.extend(zip(*[c.tolist() for c in batch]))
    return out


def by_index(rs):
    return {r[0]: r[2:] for r in rs}


@pytest.fixture
def s():
    sd = Seeder()
    sd.init(MASTER)
    return sd


def expected_worker_draws(seed):
    """What python, numpy and torch draw first after being seeded with ``seed``."""
    g = torch.Generator()
    g.manual_seed(seed)
    return (
        random.Random(seed).random(),
        float(np.random.RandomState(numpy_seed(seed)).random_sample()),
        float(torch.rand((), generator=g)),
    )


# --------------------------------------------------------------------------- fast derivation
@settings(max_examples=200, deadline=None)
@given(
    master=st.integers(0, MAX_MASTER_SEED),
    domain=st.integers(0, 5),
    task=st.integers(0, MAX_KEY),
    epoch=st.integers(0, MAX_KEY),
    rank=st.integers(0, MAX_KEY),
    stream=st.integers(0, MAX_KEY),
    words=st.integers(1, 5),
)
def test_stream_seeds_equal_seedsequence(master, domain, task, epoch, rank, stream, words):
    fast = stream_seeds(master, domain, task, epoch, rank, words)
    assert fast.exact
    want = np.random.SeedSequence(
        master, spawn_key=(domain, task, epoch, rank, stream)
    ).generate_state(words, np.uint64)
    assert fast.seed(stream) == [int(w) for w in want]
    assert fast.seed(stream)[0] == derive_seed(master, domain, task, epoch, rank, stream)
    streams = np.array([stream, 0, MAX_KEY, (stream * 7) & MAX_KEY], dtype=np.uint32)
    assert fast.seeds(streams).tolist() == [fast.seed(int(x)) for x in streams]


def test_a_block_of_streams_and_per_sample_key_words():
    got = stream_seeds(3, int(Domain.SAMPLE), 1, 2, 0).seeds(np.arange(50, dtype=np.uint32))[:, 0]
    assert got.tolist() == [derive_seed(3, Domain.SAMPLE, 1, 2, 0, i) for i in range(50)]
    assert index_words(2**40 + 7) == (2**8, 7) and index_words(MAX_KEY) == (0, MAX_KEY)


def test_sample_seed(s):
    assert sample_seed(7, 3, seeder=s) == derive_seed(MASTER, Domain.SAMPLE, 1, 3, 0, 7)
    assert sample_seed(2**40 + 7, 3, seeder=s) == derive_seed(MASTER, Domain.SAMPLE, 1, 3, 2**8, 7)
    assert sample_seed(7, 3, task=2, seeder=s) != sample_seed(7, 3, seeder=s)
    with pytest.raises(ValueError, match="index"):
        sample_seed(-1, 0, seeder=s)
    with pytest.raises(RuntimeError, match="init"):
        sample_seed(1, 0, seeder=Seeder())


# --------------------------------------------------------------------------- worker_init_fn
# in-process
def test_worker_init_fn_seeds_from_worker_domain(s):
    s.reseed(1, 4)
    gen = random.Random(0)
    s.register_generator(gen)
    shared_gen = random.Random(0)
    s.register_generator(shared_gen, shared=True)
    init = WorkerInitFn(seeder=s)
    init(3)
    seed = derive_seed(MASTER, Domain.WORKER, 1, 4, 0, 3)
    got = (random.random(), float(np.random.random()), float(torch.rand(())))
    assert got == expected_worker_draws(seed)
    words = np.random.SeedSequence(
        MASTER, spawn_key=(int(Domain.WORKER), 1, 4, 0, 3)
    ).generate_state(3, np.uint64)
    assert gen.random() == random.Random(int(words[1])).random()
    shared_words = np.random.SeedSequence(
        MASTER, spawn_key=(int(Domain.WORKER), 1, 4, 0, 3)
    ).generate_state(3, np.uint64)
    assert (
        shared_gen.random() == random.Random(int(shared_words[2])).random()
    )  # rank 0: shared == per-rank here
    init(4)
    assert random.random() != got[0]


def test_worker_seeds_differ_across_ranks():
    seeds = []
    for rank in (0, 1):
        sd = Seeder()
        sd.init(MASTER, ngpus=2, rank=rank)
        sd.reseed(1, 0)
        gen = random.Random(0)
        sd.register_generator(gen, shared=True)
        WorkerInitFn(seeder=sd)(0)
        seeds.append((random.random(), gen.random()))
    assert seeds[0][0] != seeds[1][0]  # per-rank streams differ
    assert seeds[0][1] == seeds[1][1]  # shared generators agree across ranks


def test_worker_init_fn_errors(s):
    with pytest.raises(RuntimeError, match="seeder.init"):
        WorkerInitFn(seeder=Seeder())(0)
    with pytest.raises(TypeError):
        WorkerInitFn(fn=3)
    with pytest.raises(TypeError):
        WorkerInitFn(seeder=object())
    with pytest.raises(ValueError):
        WorkerInitFn(seeder=s)(-1)
    calls = []
    make_worker_init_fn(calls.append, seeder=s)(2)
    assert calls == [2]


def test_module_level_worker_init_fn_uses_default(fresh_default):
    fresh_default.init(MASTER)
    fresh_default.reseed(1, 2)
    fresh_default.data.worker_init_fn(1)
    assert (
        random.random() == expected_worker_draws(derive_seed(MASTER, Domain.WORKER, 1, 2, 0, 1))[0]
    )


# --------------------------------------------------------------------------- SeededDataset
# in-process
def test_seeded_dataset_per_sample_values(s):
    raw = Draws()
    s.register_generator(raw.member)
    s.register_generator(raw.np_member)
    ds = SeededDataset(raw, seeder=s)
    item = ds[(2, 5)]
    seeds = np.random.SeedSequence(
        MASTER, spawn_key=(int(Domain.SAMPLE), 1, 2, 0, 5)
    ).generate_state(3, np.uint64)
    assert item[2:5] == expected_worker_draws(int(seeds[0]))
    assert item[5] == random.Random(int(seeds[1])).random()
    assert item[6] == np.random.default_rng(np.random.SeedSequence(int(seeds[2]))).random()
    assert ds[(2, 5)] == item
    for other in (ds[(3, 5)], ds[(2, 6)]):
        assert all(a != b for a, b in zip(other[2:], item[2:]))


def test_seeded_dataset_leaves_main_process_rngs_alone(s):
    ds = SeededDataset(Draws(), seeder=s)

    def seed_and_draw(between=None):
        random.seed(1)
        np.random.seed(1)
        torch.manual_seed(1)
        if between is not None:
            between()
        return random.random(), float(np.random.random()), float(torch.rand(()))

    expected = seed_and_draw()
    assert seed_and_draw(lambda: ds.__getitems__([(0, i) for i in range(8)])) == expected
    assert seed_and_draw(lambda: ds[(0, 3)]) == expected


def test_seeded_dataset_errors_and_passthrough(s):
    ds = SeededDataset(Draws(), seeder=s)
    with pytest.raises(TypeError, match=r"\(epoch, index\)"):
        ds[3]
    with pytest.raises(ValueError):
        ds[(-1, 3)]
    with pytest.raises(TypeError):
        SeededDataset(object())
    with pytest.raises(TypeError):
        SeededDataset(Draws(), per_sample=1)
    with pytest.raises(RuntimeError, match="init"):
        SeededDataset(Draws(), seeder=Seeder())[(0, 1)]
    assert ds.n == 16 and len(ds) == 16 and isinstance(ds.member, random.Random)


def test_seeded_dataset_pickles(s):
    ds = SeededDataset(Draws(), seeder=s)
    buf = io.BytesIO()
    torch.save(ds, buf)
    buf.seek(0)
    copy = torch.load(buf, weights_only=False)
    assert copy[(1, 2)] == ds[(1, 2)]


def test_dataloader_generator_keeps_global_torch_stream(s):
    loader = DataLoader(list(range(8)), batch_size=4)
    before = torch.get_rng_state()
    iter(loader)
    assert not torch.equal(
        before, torch.get_rng_state()
    )  # torch draws a base seed from the global RNG
    loader = DataLoader(
        list(range(8)), batch_size=4, generator=seeder.data.dataloader_generator(seeder=s)
    )
    before = torch.get_rng_state()
    list(loader)
    assert torch.equal(before, torch.get_rng_state())


# --------------------------------------------------------------------------- real workers
def loader(ds, s, workers, *, sampler=None, persistent=False, ctx=None, init=True, bs=2):
    ld = DataLoader(
        ds,
        batch_size=bs,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=persistent,
        worker_init_fn=WorkerInitFn(seeder=s) if init else None,
        multiprocessing_context=ctx,
        generator=seeder.data.dataloader_generator(seeder=s),
    )
    return seeder.data.watch_loader(ld) if sampler is not None else ld


@pytest.mark.slow
def test_workers_distinct_reproducible_fresh_each_epoch(s):
    ds = Draws()
    s.register_generator(ds.member)
    s.register_generator(ds.np_member)

    def epoch(e):
        s.reseed(1, e)
        return rows(loader(ds, s, 2))

    e0, e0_again, e1 = epoch(0), epoch(0), epoch(1)
    assert e0 == e0_again
    for col in range(2, 7):  # every RNG, member copies included, differs between workers and epochs
        values = [r[col] for r in e0]
        assert len(set(values)) == len(values), col
        assert {r[col] for r in e0}.isdisjoint({r[col] for r in e1}), col
    # The first item each worker produced is the first draw after its derived seed.
    for r in e0:
        if r[0] in (0, 2):  # batch 0 -> worker 0, batch 1 -> worker 1, first item of each
            assert r[2:5] == expected_worker_draws(
                derive_seed(MASTER, Domain.WORKER, 1, 0, 0, r[1])
            )


@pytest.mark.slow
def test_member_rng_copies_repeat_without_seeder(s):
    ds = Draws()
    plain = rows(DataLoader(ds, batch_size=2, num_workers=2))
    by_worker = {}
    for r in plain:
        by_worker.setdefault(r[1], []).append(r[5])
    assert by_worker[0] == by_worker[1]  # the bug: both workers' copies draw the same numbers
    s.register_generator(ds.member)
    s.reseed(1, 0)
    seeded = rows(loader(ds, s, 2))
    by_worker = {}
    for r in seeded:
        by_worker.setdefault(r[1], []).append(r[5])
    assert set(by_worker[0]).isdisjoint(by_worker[1])


@pytest.mark.slow
def test_spawn_gives_the_same_as_fork(s):
    ds = Draws()
    s.register_generator(ds.member)
    s.register_generator(ds.np_member)
    s.reseed(1, 3)
    forked = rows(loader(ds, s, 2, ctx="fork"))
    spawned = rows(loader(ds, s, 2, ctx="spawn"))
    assert spawned == forked


@pytest.mark.slow
def test_persistent_workers_fresh_per_epoch_with_seeded_dataset(s):
    ds = Draws()
    s.register_generator(ds.member)
    s.register_generator(ds.np_member)
    plain = {}
    for e in (0, 1):  # reference: non-persistent workers, started (and seeded) each epoch
        s.reseed(1, e)
        plain[e] = rows(loader(ds, s, 2))
    s.reseed(1, 0)
    only_init = loader(ds, s, 2, persistent=True)
    got = [rows(only_init)]
    s.reseed(1, 1)
    got.append(rows(only_init))
    assert (
        got[0] == plain[0] and got[1] != plain[1]
    )  # worker_init_fn alone: epoch 1 continues epoch 0's streams

    wrapped = SeededDataset(ds, per_sample=False, seeder=s)
    sampler = DistributedSampler(wrapped, shuffle=False, seeder=s)
    s.reseed(1, 0)
    persistent = loader(wrapped, s, 2, sampler=sampler, persistent=True)
    got = [rows(persistent)]
    s.reseed(1, 1)
    got.append(rows(persistent))
    assert got == [plain[0], plain[1]]  # fresh each epoch, equal to non-persistent workers


@pytest.mark.slow
def test_per_sample_seeds_independent_of_workers_and_resume(s):
    ds = Draws(24)
    s.register_generator(ds.member)
    s.register_generator(ds.np_member)
    wrapped = SeededDataset(ds, seeder=s)

    def run(workers, persistent=False, epochs=(0, 1)):
        sampler = DistributedSampler(wrapped, seeder=s)
        ld = loader(
            wrapped, s, workers, sampler=sampler, persistent=persistent and workers > 0, bs=4
        )
        out = {}
        for e in epochs:
            s.reseed(1, e)
            out[e] = by_index(rows(ld))
        return out

    ref = run(0)
    assert ref[0] != ref[1]
    for workers, persistent in ((2, False), (2, True), (4, False)):
        assert run(workers, persistent) == ref, (workers, persistent)
    # Matches the pure function of (master seed, epoch, index).
    seed = derive_seed(MASTER, Domain.SAMPLE, 1, 1, 0, 7)
    assert ref[1][7][:3] == expected_worker_draws(seed)

    # Resume mid-epoch with two workers: the rest of the epoch is the same values.
    s.reseed(1, 1)
    a = DistributedSampler(wrapped, seeder=s)
    it = iter(loader(wrapped, s, 2, sampler=a, bs=4))
    head = []
    for _ in range(2):
        batch = next(it)
        head.extend(zip(*[c.tolist() for c in batch]))
        a.advance(len(batch[0]))
    state = a.state_dict()
    del it
    b = DistributedSampler(wrapped, seeder=s)
    b.load_state_dict(state)
    tail = rows(loader(wrapped, s, 2, sampler=b, bs=4))
    assert by_index(head + tail) == ref[1]
    assert len(head) == 8 and len(tail) == 16


@pytest.mark.slow
def test_per_sample_main_process_training_stream_matches_workers(s):
    # With per-sample seeds the loop's own randomness (dropout, ...) is the same for 0 and 2
    # workers.
    wrapped = SeededDataset(Draws(), seeder=s)

    def loop(workers):
        s.reseed(1, 0)
        sampler = DistributedSampler(wrapped, seeder=s)
        draws = []
        for _ in loader(wrapped, s, workers, sampler=sampler):
            draws.append(float(torch.rand(())))
        return draws

    assert loop(0) == loop(2)


@pytest.mark.slow
def test_torchrun_two_nodes_worker_seeds_differ_by_global_rank():
    from helpers import json_lines, torchrun

    master = 777
    procs = torchrun(["tests/scripts/workers_ranks.py", str(master)], nproc=1, nnodes=2)
    rows = [r for p in procs for r in json_lines(p.stdout, "WORKERS ")]
    assert sorted((r["rank"], r["local_rank"], r["epoch"]) for r in rows) == [
        (0, 0, 0),
        (0, 0, 1),
        (1, 0, 0),
        (1, 0, 1),
    ]
    values = {}
    for r in rows:
        for index, worker, *draws in r["rows"]:
            if index in (0, 2):  # first item of worker 0 and worker 1
                seed = derive_seed(master, Domain.WORKER, 1, r["epoch"], r["rank"], worker)
                assert tuple(draws[:3]) == expected_worker_draws(seed)
        for col in range(2, 6):
            values.setdefault(col, []).extend(row[col] for row in r["rows"])
    for (
        col,
        vals,
    ) in values.items():  # no draw repeats across ranks (same local rank), workers or epochs
        assert len(set(vals)) == len(vals), col
