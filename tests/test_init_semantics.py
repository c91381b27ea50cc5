"""NVIDIA's ``init`` semantics: init starts a fresh run; a generator's seed depends only on
(master seed, rank, task, epoch, its place among the generators registered since init)."""

import random
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder import DistributedSampler, Seeder, SeederWarning
from seeder._seeding.derive import Domain, derive_seed


class Perturbation:
    """NVIDIA's example: an augmentation with its own RNG, reseeded through a callable."""

    def __init__(self):
        self.seeds = []

    def reseed_rng(self, seed):
        self.seeds.append(seed)


def nvidia_loop(masters, ranks):
    """NVIDIA's own seeder test: init per rank, register a new callable, reseed; seeds by key."""
    s = Seeder()
    got = {}
    for master in masters:
        for local_rank in ranks:
            s.init(master_seed=master, ngpus=8, local_rank=local_rank, rank=local_rank)
            pert = Perturbation()
            s.register_generator(pert.reseed_rng)
            for task, epoch in ((0, 0), (1, 0), (1, 3)):
                s.reseed(task, epoch)
                got[(master, local_rank, task, epoch)] = pert.seeds[-1]
    return s, got


def test_nvidia_loop_is_order_independent_and_leaves_one_generator():
    masters = list(range(20))
    s, forward = nvidia_loop(masters, range(8))
    assert len(s.generators()) == 1  # not 160: every init dropped the previous registrations
    _, backward = nvidia_loop(masters[::-1], range(7, -1, -1))
    assert forward == backward
    for (master, rank, task, epoch), seed in forward.items():
        assert seed == derive_seed(
            master, Domain.RANK, task, epoch, rank, stream=1
        )  # first generator since init
    assert len(set(forward.values())) == len(forward)


def test_init_drops_registered_generators_but_joined_participants_follow_the_new_run():
    s = Seeder()
    s.init(1)
    dropped = Perturbation()
    s.register_generator(dropped.reseed_rng)
    s.register_generator(random.Random())
    sampler = DistributedSampler(range(16), num_replicas=1, rank=0, seeder=s)
    s.reseed(1, 0)
    first = list(sampler)
    s.init(2)
    assert s.generators() == [] and sampler in s.participants()
    kept = Perturbation()
    s.register_generator(kept.reseed_rng)  # place 1 again: stream 1
    s.reseed(1, 0)
    assert len(dropped.seeds) == 1
    assert kept.seeds == [derive_seed(2, Domain.RANK, 1, 0, 0, stream=1)]
    assert list(sampler) != first  # the sampler follows master seed 2
    s.init(1)
    s.reseed(1, 0)
    assert list(sampler) == first


def test_register_before_init_is_an_error_and_changes_nothing():
    s = Seeder()
    with pytest.raises(RuntimeError, match="before seeder.init"):
        s.register_generator(random.Random())
    assert s.participants() == [] and not s.initialized


def test_init_leaves_other_code_s_seeding_calls_as_they_are(fresh_default):
    """After init and a reseed, torch.manual_seed(123), random.seed, np.random.seed seed as they
    say."""
    fresh_default.init(7)
    fresh_default.reseed(0, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)  # the user's call is warned: not tested here
        torch.manual_seed(123)
        random.seed(123)
        np.random.seed(123)
    assert round(float(torch.rand(1)), 4) == 0.2961
    assert random.random() == random.Random(123).random()
    assert np.random.random() == np.random.RandomState(123).random_sample()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_seeding_calls_after_init_seed_as_they_say_for_any_seed(seed):
    """Any seed: the user's own calls after init give the draws of generators seeded alike."""
    import seeder

    seeder.default_seeder().reset()
    seeder.init(7)
    seeder.reseed(0, 0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SeederWarning)
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
        own = torch.Generator().manual_seed(seed)
        assert torch.equal(torch.rand(3), torch.rand(3, generator=own))
        assert random.random() == random.Random(seed).random()
        assert np.random.random() == np.random.RandomState(seed).random_sample()
    finally:
        seeder.default_seeder().reset()


def test_a_bad_seed_raises_as_without_seeder_and_changes_nothing(fresh_default):
    fresh_default.init(7)
    fresh_default.reseed(0, 0)
    before = np.random.get_state()[1].copy(), torch.get_rng_state()
    with pytest.raises(ValueError):
        np.random.seed(-1)
    with pytest.raises(ValueError):
        torch.manual_seed(2**70)
    assert np.array_equal(before[0], np.random.get_state()[1])
    assert torch.equal(before[1], torch.get_rng_state())
