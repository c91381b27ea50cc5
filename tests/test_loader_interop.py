"""A plain torch DataLoader and torchdata's StatefulDataLoader around seeder's sampler: exact, or one warning."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.utils.data
from torchdata.stateful_dataloader import StatefulDataLoader

import seeder
from seeder import DistributedSampler, SeededDataset, Seeder, SeederWarning
from test_loader import BS, MASTER, Noisy

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def plain(num_workers=0, generator=True, wrap=False):
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    ds = SeededDataset(Noisy(), seeder=s) if wrap else Noisy()
    smp = DistributedSampler(ds, seeder=s)
    gen = seeder.dataloader_generator(seeder=s) if generator else None
    return s, smp, torch.utils.data.DataLoader(ds, batch_size=BS, sampler=smp, num_workers=num_workers, generator=gen)


def seeder_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, SeederWarning)]


def test_no_generator_warns_once():
    s, smp, loader = plain(generator=False)
    it = iter(loader)
    smp.advance(len(next(it)))
    got = seeder_warnings(s.state_dict) + seeder_warnings(s.state_dict)
    assert len(got) == 1 and "no generator" in got[0] and "generator=seeder.dataloader_generator()" in got[0]


def test_complete_recipe_does_not_warn():
    s, smp, loader = plain(generator=True)
    it = iter(loader)
    smp.advance(len(next(it)))
    assert seeder_warnings(s.state_dict) == []


def test_mid_epoch_without_position_warns():
    s, smp, loader = plain()
    next(iter(loader))
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "no sample was reported consumed" in got[0] and "advance" in got[0]


def test_exhausted_but_not_consumed_warns():
    s, smp, loader = plain()
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "drew every index of epoch 0" in got[0]


@pytest.mark.slow
def test_workers_without_position_seeding_warn_and_seeded_dataset_does_not():
    s, smp, loader = plain(num_workers=2)
    it = iter(loader)
    smp.advance(len(next(it)))
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "worker randomness" in got[0] and "SeededDataset" in got[0]
    del it
    s, smp, loader = plain(num_workers=2, wrap=True)
    it = iter(loader)
    smp.advance(len(next(it)))
    assert seeder_warnings(s.state_dict) == []


def stateful(num_workers):
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    ds = SeededDataset(Noisy(), seeder=s)
    smp = DistributedSampler(ds, seeder=s)
    return StatefulDataLoader(ds, batch_size=BS, sampler=smp, num_workers=num_workers,
                              generator=seeder.dataloader_generator(seeder=s))


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_stateful_dataloader_resumes_exactly(num_workers):
    ref = list(stateful(num_workers))
    loader = stateful(num_workers)
    it = iter(loader)
    head = [next(it) for _ in range(2)]
    states = []
    assert seeder_warnings(lambda: states.append(loader.state_dict())) == []  # torchdata keeps the position:
    assert seeder_warnings(loader.state_dict) == []  # no advance() needed, from the first state on
    state = states[0]
    again = stateful(num_workers)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(ref) - 2  # not the whole epoch again
    assert all(torch.equal(a, b) for a, b in zip(head + rest, ref))


def test_sampler_iterator_state_is_o1():
    s = Seeder()
    s.init(MASTER)
    big = DistributedSampler(range(10**8), seeder=s)
    s.reseed(1, 0)
    it = iter(big)
    first = [next(it) for _ in range(5)]
    st = it.state_dict()
    assert st["yielded"] == 5
    fresh = iter(big)
    fresh.load_state_dict({"format": "seeder.sampler_iter", "yielded": 3})
    assert [next(fresh), next(fresh)] == first[3:]
