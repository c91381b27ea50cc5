"""Checkpoints loaded onto another device or dtype: RNG states come back to the CPU, or a clear
StateError naming map_location='cpu' and nothing changes. (On a GPU, tests/test_cuda.py loads with
map_location="cuda".)"""

import io
import random

import numpy as np
import pytest
import torch
from helpers import global_rng_fingerprint

from seeder import Seeder, StateError


def _seeder():
    s = Seeder()
    s.init(3)
    g = torch.Generator()
    s.register_generator(g)
    s.register_generator(np.random.default_rng())
    s.reseed(1, 0)
    return s, g


def _reloaded(state, map_location):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, map_location=map_location, weights_only=True)


def test_a_checkpoint_loaded_onto_the_meta_device_is_refused_and_changes_nothing():
    s, g = _seeder()
    state = _reloaded(
        s.state_dict(), "meta"
    )  # what map_location= does to every tensor, on a device without data
    before, gen_before = global_rng_fingerprint(), g.get_state()
    with pytest.raises(StateError, match=r"meta device.*map_location='cpu'"):
        s.load_state_dict(state)
    assert global_rng_fingerprint() == before and torch.equal(g.get_state(), gen_before)


@pytest.mark.parametrize("path", [("rngs", "torch"), ("rngs", "numpy", "key")])
def test_rng_states_of_the_wrong_dtype_are_refused_naming_the_fix(path):
    s, _ = _seeder()
    state = s.state_dict()
    holder = state
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = holder[path[-1]].float()
    before = global_rng_fingerprint()
    with pytest.raises(StateError, match=r"map_location='cpu'"):
        s.load_state_dict(state)
    assert global_rng_fingerprint() == before


def test_a_checkpoint_mapped_to_the_cpu_restores_exactly():
    s, g = _seeder()
    state = _reloaded(s.state_dict(), lambda storage, location: storage)
    want = (
        random.random(),
        float(np.random.rand()),
        torch.rand(2).tolist(),
        torch.rand(2, generator=g).tolist(),
    )
    s.load_state_dict(state)
    assert (
        random.random(),
        float(np.random.rand()),
        torch.rand(2).tolist(),
        torch.rand(2, generator=g).tolist(),
    ) == want
