"""Loads of another world size, loaders refused as they are built, states without a reseed, stale
iterators and rebuilt loaders: each refusal changes nothing and says what was wrong; each warning
names the real cause."""

from __future__ import annotations

import gc
import random
import warnings

import pytest
import torch

import seeder
from seeder import StateError
from seeder._seeding.rngs import global_adapters

N = 23


class Augmented(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i), random.random(), float(torch.rand(()))], dtype=torch.float64)


def elastic(s, world=1, rank=0, batch=None):
    return seeder.ElasticDataLoader(
        Augmented(),
        batch_size=batch or 4 // world,
        shuffle=True,
        num_replicas=world,
        rank=rank,
        seeder=s,
    )


def default(s):
    return seeder.DataLoader(Augmented(), batch_size=2, shuffle=True, seeder=s)


def rng_states():
    return [a.get_state() for a in global_adapters()]


def same_rngs(a, b):
    def eq(x, y):
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and torch.equal(x, y)
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        return bool(x == y)

    return eq(a, b)


@pytest.fixture(scope="module")
def two_ranks_state():
    """Rank 1's state of a world of 2 whose only participant is an elastic loader, two global steps
    in."""
    two = seeder.Seeder()
    two.init(9, ngpus=2, rank=1)
    loader = elastic(two, 2, 1)
    two.reseed(1, 0)
    it = iter(loader)
    next(it), next(it)
    return two.state_dict()


PER_RANK = {
    "default loader": lambda s: [default(s)],
    "sampler": lambda s: [seeder.DistributedSampler(range(N), seeder=s)],
    "elastic and sampler": lambda s: [elastic(s), seeder.DistributedSampler(range(N), seeder=s)],
    "elastic and default loader": lambda s: [elastic(s), default(s)],
}


@pytest.mark.parametrize("build", list(PER_RANK.values()), ids=list(PER_RANK))
def test_another_world_is_refused_before_anything_loads_when_a_participant_cannot_move(
    two_ranks_state, build
):
    one = seeder.Seeder()
    one.init(3)
    built = build(one)
    one.reseed(1, 0)
    positions = [b.state_dict()["position"] for b in built]
    before = rng_states()
    for call in (one.check_state_dict, one.load_state_dict):
        with pytest.raises(
            StateError, match=r"world of 2 .*(sampler\.0|loader\.1|loader\.0).* cannot|world of 2"
        ):
            call(two_ranks_state)
    with pytest.raises(StateError, match="nothing was loaded") as info:
        one.load_state_dict(two_ranks_state)
    assert "keep(s) one rank's state" in str(info.value)
    assert "see docs/checkpoints.md#another-world-size" in str(info.value)
    assert one.get_master_seed() == 3 and one.last_reseed == (1, 0) and not one.pending.parts
    assert (
        same_rngs(rng_states(), before) and [b.state_dict()["position"] for b in built] == positions
    )
    one.reseed(1, 1)  # the run goes on as if the load had not been tried
    before = rng_states()
    for call in (one.check_state_dict, one.load_state_dict):
        # asked for the next epoch boundary, but the checkpoint holds nothing for the loaders or
        # samplers of one rank here: refused, not loaded with nothing for them
        with pytest.raises(StateError, match="holds the state of elastic loaders only") as info:
            call(two_ranks_state, allow_world_change=True)
    assert "nothing was loaded" in str(info.value)
    assert one.get_master_seed() == 3 and one.last_reseed == (1, 1) and not one.pending.parts
    assert same_rngs(rng_states(), before)


def test_a_state_of_another_world_is_checked_as_it_loads_before_its_loader_is_built(
    two_ranks_state,
):
    """``check_state_dict`` (what ``seeder.Checkpoint.resume`` runs before loading anything) accepts
    what ``load_state_dict`` loads: an elastic state of another world whose loader is built after
    the load."""
    one = seeder.Seeder()
    one.init(9)
    one.check_state_dict(two_ranks_state)
    one.load_state_dict(two_ranks_state)
    loader = elastic(one)
    assert loader.state_dict()["position"] == 8


@pytest.mark.parametrize("world_of_state", [1, 2])
def test_a_loader_refused_as_it_is_built_is_not_registered_while_its_exception_is_kept(
    two_ranks_state, world_of_state
):
    if world_of_state == 2:
        state, make, good = two_ranks_state, (lambda s: elastic(s, batch=3)), elastic
    else:
        saver = seeder.Seeder()
        saver.init(9)
        saved = default(saver)
        saver.reseed(1, 0)
        next(iter(saved))
        state = saver.state_dict()
        make, good = (
            (lambda s: seeder.DataLoader(Augmented(), batch_size=3, shuffle=True, seeder=s)),
            default,
        )
    one = seeder.Seeder()
    one.init(9)
    one.load_state_dict(state)
    with pytest.raises(StateError, match="does not fit the one just built") as info:
        make(one)
    kept = info  # a notebook keeps the last exception, and with it the refused loader
    assert one.stateful() == {} and one.participants() == []
    loader = good(one)  # the right loader, built next, takes the waiting state
    assert list(one.stateful()) == ["loader.0"] and loader.state_dict()["position"] == (
        8 if world_of_state == 2 else 2
    )
    assert kept.value is not None


@pytest.mark.parametrize("make", [elastic, default], ids=["elastic", "default"])
def test_a_reseed_after_loading_a_state_saved_inside_an_epoch_before_any_reseed_is_refused(make):
    reference = seeder.Seeder()
    reference.init(9)
    full = torch.cat(list(make(reference)))  # no reseed in the saved run: the loader's first epoch
    saver = seeder.Seeder()
    saver.init(9)
    loader = make(saver)
    it = iter(loader)
    done = torch.cat([next(it), next(it)])
    state = saver.state_dict()
    assert state["last_reseed"] is None

    one = seeder.Seeder()
    one.init(9)
    resumed = make(one)
    one.load_state_dict(state)
    before = rng_states()
    with pytest.raises(
        StateError, match=r"reseed\(1, 0\) refused: .*last_reseed is None.*nothing was changed"
    ):
        one.reseed(1, 0)
    assert same_rngs(rng_states(), before) and one.last_reseed is None
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error", seeder.SeederWarning
        )  # nothing moved: no warning blames an RNG
        rest = torch.cat(list(resumed))
    assert torch.equal(torch.cat([done, rest]), full)  # exact, as the saved run went on
    one.reseed(1, 1)  # the next epoch is seeded as usual


def test_a_state_whose_last_reseed_was_removed_is_refused_at_the_reseed_not_resumed_differently():
    saver = seeder.Seeder()
    saver.init(9)
    loader = default(saver)
    saver.reseed(1, 0)
    it = iter(loader)
    next(it)
    state = saver.state_dict()
    state["last_reseed"] = None
    one = seeder.Seeder()
    one.init(9)
    resumed = default(one)
    one.load_state_dict(state)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(StateError, match="last_reseed is None"):
            one.reseed(1, 0)
    assert not [w for w in caught if "torch DataLoader without generator" in str(w.message)]
    assert (
        len(list(resumed)) == 11
    )  # its data goes on from the loaded position (1 of 12 batches done)


def test_a_refused_stale_next_changes_no_registered_generator():
    s = seeder.Seeder()
    s.init(3)
    gen = random.Random()
    s.register_generator(gen)
    s.reseed(1, 0)

    class Draws(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.tensor([float(i), gen.random()])

    loader = seeder.DataLoader(Draws(), batch_size=2, shuffle=True, seeder=s)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    next(it)
    loader.load_state_dict(state)
    before, rngs = gen.getstate(), rng_states()
    with pytest.raises(RuntimeError, match="started before loader.load_state_dict"):
        next(it)
    assert gen.getstate() == before and same_rngs(rng_states(), rngs)


def test_a_sampler_shown_with_a_loader_dropped_since_warns_for_the_loader_rebuilt_around_it():
    s = seeder.Seeder()
    s.init(0)
    s.reseed(1, 0)
    sampler = seeder.DistributedSampler(range(8), seeder=s)

    def taken(loader):
        it = iter(loader)
        next(it)
        sampler.advance(2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sampler.state_dict()
        return [str(w.message) for w in caught]

    shown = seeder.data.watch_loader(
        torch.utils.data.DataLoader(range(8), sampler=sampler, batch_size=2)
    )
    assert any("no generator" in m for m in taken(shown))
    del shown
    gc.collect()
    s.reseed(1, 1)
    rebuilt = torch.utils.data.DataLoader(range(8), sampler=sampler, batch_size=2)  # not shown
    assert any("loader not shown" in m for m in taken(rebuilt))
    seeder.data.watch_loader(rebuilt)
    s.reseed(1, 2)
    assert any(
        "no generator" in m for m in taken(rebuilt)
    )  # its own problems, though the dropped one's were said
