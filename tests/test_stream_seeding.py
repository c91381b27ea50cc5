"""The seeding functions a stream's per-example loop binds once: each does what its adapter's
``seed`` does, for every 64-bit seed, whatever the RNG held before (a cached Gaussian included)."""

from __future__ import annotations

import random

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder._seeding.rngs import NumpyRandomStateAdapter, PythonRandomAdapter
from seeder._seeding.rngs_torch import TorchGeneratorAdapter

seeds = st.integers(0, 2**64 - 1)


@settings(max_examples=60, deadline=None)
@given(seed=seeds, before=st.integers(0, 2**32))
def test_python_seed_function_is_seed(seed, before):
    fast, slow = random.Random(before), random.Random(before)
    fast.gauss(0, 1), slow.gauss(0, 1)  # a Gaussian cached: seeding empties it
    PythonRandomAdapter(fast).seed_function()(seed)
    PythonRandomAdapter(slow).seed(seed)
    assert fast.getstate() == slow.getstate()
    assert [fast.gauss(0, 1), fast.random()] == [slow.gauss(0, 1), slow.random()]


def test_a_random_subclass_keeps_its_own_seed():
    class Counting(random.Random):
        calls = 0

        def seed(self, *args, **kwargs):
            Counting.calls += 1
            super().seed(*args, **kwargs)

    rng = Counting(0)
    before = Counting.calls
    PythonRandomAdapter(rng).seed_function()(5)
    assert Counting.calls == before + 1 and rng.random() == random.Random(5).random()


@settings(max_examples=60, deadline=None)
@given(seed=seeds)
def test_numpy_and_torch_seed_functions_are_seed(seed):
    fast, slow = np.random.RandomState(1), np.random.RandomState(1)
    fast.standard_normal(), slow.standard_normal()
    NumpyRandomStateAdapter(fast).seed_function()(seed)
    NumpyRandomStateAdapter(slow).seed(seed)
    assert fast.standard_normal(3).tolist() == slow.standard_normal(3).tolist()
    g, h = torch.Generator(), torch.Generator()
    TorchGeneratorAdapter(g).seed_function()(seed)
    TorchGeneratorAdapter(h).seed(seed)
    assert torch.equal(g.get_state(), h.get_state())
