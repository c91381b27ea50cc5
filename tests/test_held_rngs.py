"""A dataset's own RNG objects, which seeder does not seed: a batch drawing from one warns, naming
it and ``seeder.register_generator``; registered, its items are the same with 0 and 2 workers.

Real torch, NumPy and Python RNG objects, held by the dataset or by its transforms; seeder's map
and elastic loaders.
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seeder
from seeder import SeederWarning
from seeder.data._heldrngs import held_rngs

LOADERS = {"map": seeder.DataLoader, "elastic": seeder.ElasticDataLoader}


class Noisy(torch.utils.data.Dataset):
    """Items drawn from a ``torch.Generator`` the dataset holds."""

    def __init__(self):
        self.gen = torch.Generator().manual_seed(0)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> float:
        return float(torch.rand((), generator=self.gen)) + i


class Jitter:
    def __init__(self, rng):
        self.rng = rng

    def __call__(self, x: float) -> float:
        if isinstance(self.rng, random.Random):
            return x + self.rng.random()
        return x + float(self.rng.random())


class Transformed(torch.utils.data.Dataset):
    """Items through a transform that holds a NumPy or Python RNG (as a ``Compose`` list)."""

    def __init__(self, rng):
        self.transforms = [Jitter(rng)]

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> float:
        return self.transforms[0](float(i))


class GlobalHeld(torch.utils.data.Dataset):
    """Holds the global RNGs themselves (and a module), which the loader seeds."""

    def __init__(self):
        self.gen, self.rng = torch.default_generator, random.random.__self__
        self.np_rng, self.module = np.random.random.__self__, np.random

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> float:
        return float(torch.rand((), generator=self.gen)) + self.rng.random() + self.np_rng.rand()


class SplitOnce(torch.utils.data.Dataset):
    """Holds an RNG it used once, at construction, and draws nothing from while fetching."""

    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.order = self.rng.permutation(8)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> float:
        return float(self.order[i])


def _items(s, kind, dataset, workers=0, epoch=0):
    s.reseed(1, epoch)
    loader = LOADERS[kind](dataset, batch_size=2, num_workers=workers, seeder=s)
    return [x for batch in loader for x in batch.tolist()]


@pytest.fixture
def s():
    s = seeder.Seeder()
    s.init(5)
    return s


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_batch_drawing_from_the_dataset_s_own_generator_warns_once(s, kind):
    with pytest.warns(SeederWarning, match=r"drew from dataset\.gen: RNG object") as caught:
        _items(s, kind, Noisy())
    held = [w for w in caught if "RNG object(s) the dataset holds" in str(w.message)]
    assert len(held) == 1 and "seeder.register_generator(dataset.gen)" in str(held[0].message)


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize(
    "rng",
    [np.random.default_rng(1), np.random.RandomState(1), random.Random(1)],
    ids=["numpy-generator", "random-state", "python-random"],
)
def test_an_rng_held_by_a_transform_is_found(s, kind, rng):
    with pytest.warns(SeederWarning, match=r"dataset\.transforms\[0\]\.rng"):
        _items(s, kind, Transformed(rng))


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_registered_generator_or_an_rng_not_drawn_while_fetching_is_silent(s, kind):
    data = Noisy()
    s.register_generator(data.gen)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        _items(s, kind, data)
        _items(s, kind, SplitOnce(), epoch=1)
        _items(s, kind, GlobalHeld(), epoch=2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_a_registered_generator_gives_the_same_items_with_0_and_2_workers(kind):
    runs = []
    for workers in (0, 2):
        s = seeder.Seeder()
        s.init(5)
        data = Noisy()
        s.register_generator(data.gen)
        runs.append(_items(s, kind, data, workers=workers))
    assert runs[0] == runs[1]


RNGS = st.sampled_from(["torch", "numpy", "python", "none"])


class Box:
    pass


def _make(kind):
    return {
        "torch": lambda: torch.Generator(),
        "numpy": lambda: np.random.default_rng(),
        "python": lambda: random.Random(),
        "none": lambda: 3,
    }[kind]()


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(
        st.tuples(st.sampled_from(["attr", "list", "dict", "nested"]), RNGS, st.booleans()),
        max_size=6,
    )
)
def test_held_rngs_finds_every_unregistered_rng_a_few_levels_down(layout):
    """Whatever mix of attributes, lists, dicts and nested objects holds them, every RNG object is
    found once, at the path a user would write, except the registered ones."""
    root, expected, registered = Box(), set(), []
    for n, (where, kind, is_registered) in enumerate(layout):
        rng = _make(kind)
        if where == "attr":
            setattr(root, f"a{n}", rng)
            path = f"dataset.a{n}"
        elif where == "list":
            setattr(root, f"l{n}", [0, rng])
            path = f"dataset.l{n}[1]"
        elif where == "dict":
            setattr(root, f"d{n}", {"k": rng})
            path = f"dataset.d{n}['k']"
        else:
            inner = Box()
            inner.rng = rng
            setattr(root, f"n{n}", inner)
            path = f"dataset.n{n}.rng"
        if kind == "none":
            continue
        if is_registered:
            registered.append(rng.manual_seed if kind == "torch" else rng)
        else:
            expected.add(path)
    found = [path for path, _ in held_rngs(root, registered)]
    assert sorted(found) == sorted(expected)


@pytest.mark.slow
def test_with_workers_each_worker_that_draws_warns_on_its_stderr():
    """In DataLoader workers the fetch runs there: each worker that drew says so on its stderr."""
    from helpers import run_python

    code = (
        "import torch, seeder\n"
        "class Noisy(torch.utils.data.Dataset):\n"
        "    def __init__(self): self.gen = torch.Generator().manual_seed(0)\n"
        "    def __len__(self): return 8\n"
        "    def __getitem__(self, i): return float(torch.rand((), generator=self.gen))\n"
        "if __name__ == '__main__':\n"
        "    seeder.init(5); seeder.reseed(1, 0)\n"
        "    for _ in seeder.DataLoader(Noisy(), batch_size=2, num_workers=2): pass\n"
    )
    err = run_python(["-c", code], env={"SEEDER_QUIET": "1"}).stderr
    assert err.count("drew from dataset.gen: RNG object(s) the dataset holds") == 2, err


def _seeded_loader(s, data):
    wrapped = seeder.data.SeededDataset(data, seeder=s)
    sampler = seeder.DistributedSampler(wrapped, seeder=s)
    return list(torch.utils.data.DataLoader(wrapped, batch_size=2, sampler=sampler))


def test_seeded_dataset_for_torch_s_loader_warns_too(s):
    """``seeder.data.SeededDataset`` (per-sample seeds for torch's own DataLoader) watches the
    dataset's RNG objects the same way; registered, they are seeded per sample and say nothing."""
    s.reseed(1, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _seeded_loader(s, Noisy())
    held = [str(w.message) for w in caught if "RNG object(s)" in str(w.message)]
    assert len(held) == 1 and "SeededDataset: a fetch drew from dataset.gen" in held[0], held
    data = Noisy()
    s.register_generator(data.gen)
    s.reseed(1, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _seeded_loader(s, data)
    assert not [w for w in caught if "RNG object(s)" in str(w.message)]
