"""seeder.DataLoader: exact resume by construction, with real DataLoader workers."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data

import seeder
from seeder import DataLoader, DistributedSampler, Seeder, StateError
from seeder._seeding.derive import batch_seeds

MASTER = 777
N, BS = 23, 4  # 6 batches an epoch, the last one short
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class Noisy(torch.utils.data.Dataset):
    """Each item draws from random, NumPy's global RNG and torch's CPU generator."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor(
            [float(i), random.random(), float(np.random.random()), float(torch.rand(()))],
            dtype=torch.float64,
        )


def train(s, loader, epochs, stop=None, start_epoch=0):
    """The training loop: reseed per epoch, draw from the global RNGs each step (isolation), stop
    after ``stop`` steps.

    Returns the per-step records and, if stopped, the seeder state taken after the last step.
    """
    out, step = [], 0
    for epoch in range(start_epoch, epochs):
        s.reseed(1, epoch)
        for batch in loader:
            loop = torch.tensor(
                [random.random(), float(np.random.random()), float(torch.rand(()))],
                dtype=torch.float64,
            )
            out.append((epoch, batch, loop))
            step += 1
            if stop is not None and step == stop:
                return out, s.state_dict()
    return out, None


def same(a, b):
    assert len(a) == len(b)
    for (ea, xa, la), (eb, xb, lb) in zip(a, b):
        assert ea == eb
        assert torch.equal(xa, xb), (xa, xb)
        assert torch.equal(la, lb), (la, lb)


def fresh(num_workers=0, **kw):
    s = Seeder()
    s.init(MASTER)
    return s, DataLoader(
        Noisy(), batch_size=BS, shuffle=True, num_workers=num_workers, seeder=s, **kw
    )


def resume(state, epochs, num_workers=0, **kw):
    s, loader = fresh(num_workers, **kw)
    s.load_state_dict(state)
    epoch = state["last_reseed"][1]
    return train(s, loader, epochs, start_epoch=epoch)[0]


@pytest.fixture(scope="module")
def reference():
    s, loader = fresh(0)
    return train(s, loader, 2)[0]


# --------------------------------------------------------------------------- fast (0 workers)
def test_epoch_is_a_permutation_and_epochs_differ(reference):
    e0 = torch.cat([b for e, b, _ in reference if e == 0])[:, 0].long().tolist()
    e1 = torch.cat([b for e, b, _ in reference if e == 1])[:, 0].long().tolist()
    assert sorted(e0) == sorted(e1) == list(range(N))
    assert e0 != e1
    assert len(reference) == 12


@pytest.mark.parametrize(
    "stop", [1, 3, 5, 6, 7, 11]
)  # first, middle, last batch, epoch boundary, next epoch
def test_resume_is_bitwise_from_any_step(reference, stop):
    s, loader = fresh(0)
    head, state = train(s, loader, 2, stop=stop)
    same(head, reference[:stop])
    state = torch.load(_roundtrip(state), weights_only=True)
    same(resume(state, 2), reference[stop:])


def test_a_draw_between_load_and_the_resumed_epoch_warns_and_names_the_rng(reference):
    s, loader = fresh(0)
    _, state = train(s, loader, 2, stop=3)
    s2, again = fresh(0)
    s2.load_state_dict(state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.nn.Linear(
            2, 2
        )  # a model built after the load draws its initial weights from torch's global RNG
        first = next(iter(again))
    got = [str(w.message) for w in caught if issubclass(w.category, seeder.SeederWarning)]
    assert len(got) == 1 and got[0].startswith(
        "seeder.DataLoader: the resumed epoch 0 starts with torch's global RNG"
    )
    assert torch.equal(
        first, reference[3][1]
    )  # the data itself is exact; the training loop's stream is not
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resume(state, 2)  # nothing drawn in between: no warning
    assert not [w for w in caught if issubclass(w.category, seeder.SeederWarning)]


def test_loop_randomness_untouched_by_fetching(reference):
    """The loop's draws are those of a run without any data loading (the main process's RNGs are put
    back)."""
    s = Seeder()
    s.init(MASTER)
    loops = []
    for epoch in range(2):
        s.reseed(1, epoch)
        for _ in range(6):
            loops.append(
                torch.tensor(
                    [random.random(), float(np.random.random()), float(torch.rand(()))],
                    dtype=torch.float64,
                )
            )
    assert all(torch.equal(a, r[2]) for a, r in zip(loops, reference))


def test_batch_content_is_pure_function_of_seed_epoch_position(reference):
    """Batch b of epoch e is the dataset fetched right after seeding from batch_seeds(...)."""
    epoch, batch, _ = reference[7]  # epoch 1, batch 1
    idx = batch[:, 0].long().tolist()
    seed = batch_seeds(MASTER, 1, 1, 0, 1)[0]
    seeder.data._workers.seed_globals(seed)
    want = torch.stack([Noisy()[i] for i in idx])
    assert torch.equal(want, batch)


def test_loader_state_alone_resumes(reference):
    """The loader's own state_dict/load_state_dict (torchdata's Stateful names, Lightning's fit
    loop)."""
    s, loader = fresh(0)
    s.reseed(1, 0)
    it = iter(loader)
    for _ in range(2):
        next(it)
    st = loader.state_dict()
    assert (st["epoch"], st["batch"], st["position"]) == (0, 2, 8)
    s2, again = fresh(0)
    s2.reseed(1, 0)
    again.load_state_dict(st)
    again.load_state_dict(st)  # loading twice does not double-apply
    got = [b for b in again]
    assert len(got) == 4
    assert all(torch.equal(g[:, 0], r[1][:, 0]) for g, r in zip(got, reference[2:6]))


def test_seeder_state_carries_loader_position():
    s, loader = fresh(0)
    s.reseed(1, 0)
    it = iter(loader)
    next(it)
    parts = s.state_dict()["participants"]
    assert list(parts) == ["loader.0"]
    assert parts["loader.0"]["position"] == BS


def test_epoch_done_state_starts_next_epoch(reference):
    s, loader = fresh(0)
    head, state = train(s, loader, 2, stop=6)
    assert state["participants"]["loader.0"]["batch"] == 6
    s2, again = fresh(0)
    s2.load_state_dict(state)
    s2.reseed(1, 0)  # a loop that restarts its epoch counter at the saved epoch
    assert list(again) == []
    s2.reseed(1, 1)
    got = [b for b in again]
    assert all(torch.equal(g, r[1]) for g, r in zip(got, reference[6:]))


def test_bad_state_raises_and_changes_nothing():
    s, loader = fresh(0)
    s.reseed(1, 0)
    it = iter(loader)
    next(it)
    good = loader.state_dict()
    for bad, match in [
        ({"format": "x"}, "not a seeder.DataLoader state"),
        ({**good, "batch": 99}, "must be an int in"),
        ({**good, "batch_size": 5}, "batch_size=5"),
        ({**good, "position": 3}, "does not match"),
    ]:
        with pytest.raises(StateError, match=match):
            loader.load_state_dict(bad)
    assert loader.state_dict() == good


def test_foreign_sampler_is_refused():
    with pytest.raises(TypeError, match="seeder.DistributedSampler"):
        DataLoader(Noisy(), sampler=torch.utils.data.RandomSampler(range(N)))


def test_user_seeder_sampler_is_used():
    s = Seeder()
    s.init(MASTER)
    smp = DistributedSampler(Noisy(), num_replicas=2, rank=1, seeder=s)
    loader = DataLoader(Noisy(), batch_size=BS, sampler=smp, seeder=s)
    s.reseed(1, 0)
    got = torch.cat(list(loader))[:, 0].long().tolist()
    assert loader.sampler is smp and len(got) == smp.num_samples


def test_iter_does_not_draw_global_rng():
    s, loader = fresh(0)
    s.reseed(1, 0)
    before = torch.get_rng_state()
    it = iter(loader)
    next(it)
    assert torch.equal(before, torch.get_rng_state())


def _roundtrip(state):
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


# --------------------------------------------------------------------------- workers
@pytest.mark.slow
def test_workers_match_main_process_and_resume_with_other_counts(reference):
    s, loader = fresh(2)
    same(train(s, loader, 2)[0], reference)  # 2 workers == 0 workers
    s, loader = fresh(2, persistent_workers=True)
    head, state = train(s, loader, 2, stop=3)
    same(head, reference[:3])
    same(resume(state, 2, num_workers=3), reference[3:])  # saved with 2 workers, resumed with 3


@pytest.mark.slow
def test_spawn_workers_resume_exactly(reference):
    s, loader = fresh(2, multiprocessing_context="spawn", persistent_workers=True)
    head, state = train(s, loader, 1, stop=2)
    same(head, reference[:2])
    same(resume(state, 2, num_workers=0), reference[2:])
