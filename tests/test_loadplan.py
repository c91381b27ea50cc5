"""The load plan: one reading of a state decides what loads now, what waits and what moves.

Planning changes nothing; a refused load changes nothing.
"""

import copy
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seeder
from seeder._errors import StateError
from seeder._seeding.participant import LoadContext
from seeder._state.plan import EXACT, MOVE, MOVE_WHEN_BUILT, NEXT_EPOCH, check_state, plan_load

N = 23


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i), random.random(), float(torch.rand(()))], dtype=torch.float64)


def elastic(s, world, rank):
    return seeder.ElasticDataLoader(
        Data(), batch_size=4 // world, shuffle=True, num_replicas=world, rank=rank, seeder=s
    )


def two_rank_state():
    """Rank 1's state of a world of 2 (an elastic loader two batches in, a registered generator)."""
    two = seeder.Seeder()
    two.init(9, ngpus=2, rank=1)
    two.register_generator(torch.Generator())
    loader = elastic(two, 2, 1)
    two.reseed(1, 0)
    it = iter(loader)
    next(it), next(it)
    return two.state_dict()


def snapshot(s, *reads):
    """Everything a load may change: the global RNGs, the participants' states (``reads``), the
    run, the waiting parts."""
    run = s.run
    return (
        torch.get_rng_state(),
        random.getstate(),
        np.random.get_state()[1].tobytes(),
        *[copy.deepcopy(read()) for read in reads],
        (run.master, run.last, run.resume_pending, frozenset(run.seen), run.torn),
        dict(s.pending.parts),
        s.pending.moved,
    )


def same(a, b):
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_a_world_change_plan_lists_what_moves_and_planning_changes_nothing():
    saved = two_rank_state()
    one = seeder.Seeder()
    one.init(9)
    gen = torch.Generator()
    one.register_generator(gen)
    loader = elastic(one, 1, 0)
    before = snapshot(one, loader.state_dict, gen.get_state)
    plan = plan_load(one, saved, False)
    assert (plan.how, plan.loads, dict(plan.waits)) == (MOVE, ("loader.0",), {})
    assert plan.run.master == 9 and plan.run.last == (1, 0)
    assert same(snapshot(one, loader.state_dict, gen.get_state), before)  # a plan only reads

    later = seeder.Seeder()
    later.init(9)
    later.register_generator(torch.Generator())
    plan = plan_load(later, saved, False)  # the loader is not built yet: its part waits
    assert (plan.how, plan.loads, list(plan.waits)) == (MOVE_WHEN_BUILT, (), ["loader.0"])

    sampled = seeder.Seeder()
    sampled.init(9)
    sampler = seeder.DistributedSampler(range(N), seeder=sampled)
    no_loader = dict(saved, participants={})
    with pytest.raises(StateError, match="world of 2"):
        plan_load(sampled, no_loader, False)
    plan = plan_load(sampled, no_loader, True)  # from the next epoch: nothing of that world loads
    assert (plan.how, plan.loads, dict(plan.waits)) == (NEXT_EPOCH, (), {})
    del sampler


def test_an_exact_plan_splits_what_loads_now_from_what_waits():
    a = seeder.Seeder()
    a.init(3)
    a.register_generator(random.Random())
    loader = seeder.DataLoader(Data(), batch_size=4, shuffle=True, seeder=a)
    a.reseed(1, 0)
    next(iter(loader))
    saved = a.state_dict()

    b = seeder.Seeder()
    b.init(3)
    b.register_generator(random.Random())
    plan = check_state(b, saved, False)
    assert (plan.how, plan.loads, list(plan.waits)) == (EXACT, ("generator.1",), ["loader.0"])
    assert list(plan.entry["participants"]) == ["generator.1"]


def test_a_load_forgets_what_an_earlier_load_of_another_world_left_waiting():
    """A state of another world whose loader is not built waits; an exact load after it replaces
    it whole, so the loader built afterwards continues the exact state and the other world's
    streams are not re-derived."""
    other_world = two_rank_state()
    src = seeder.Seeder()
    src.init(9)
    src_loader = elastic(src, 1, 0)
    src.reseed(1, 0)
    next(iter(src_loader))
    exact = src.state_dict()

    s = seeder.Seeder()
    s.init(9)
    s.load_state_dict(other_world)
    assert s.pending.names() == ["seeder.DataLoader loader.0"]
    s.load_state_dict(exact)
    loader = elastic(s, 1, 0)  # claims the exact state's part
    assert loader.state_dict()["position"] == exact["participants"]["loader.0"]["position"]
    assert torch.equal(torch.get_rng_state(), exact["rngs"]["torch"])


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2**65),
    st.text(max_size=3),
    st.lists(st.integers(-1, 3), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
FIELDS = [
    "format",
    "version",
    "derivation_version",
    "master_seed",
    "world_size",
    "rank",
    "last_reseed",
    "rngs",
    "participants",
    "extra",
]


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(FIELDS), value=VALUES, gathered=st.booleans())
def test_a_refused_plan_changes_nothing(field, value, gathered):
    """Whatever field of a state is replaced by whatever value: the load is refused with nothing
    changed (RNGs, participants, run, waiting parts), or it loads."""
    s = seeder.Seeder()
    s.init(4)
    gen = random.Random(1)
    s.register_generator(gen)
    sampler = seeder.DistributedSampler(range(N), seeder=s)
    s.reseed(1, 0)
    saved = s.state_dict()
    s.reseed(1, 1)
    random.random()
    bad = copy.deepcopy(saved)
    bad[field] = value
    if gathered:
        bad = {"format": "seeder-gathered", "version": 1, "world_size": 1, "ranks": [bad]}
    before = snapshot(s, gen.getstate, sampler.state_dict)
    try:
        s.check_state_dict(bad)
    except (StateError, TypeError, ValueError):
        pass
    assert same(snapshot(s, gen.getstate, sampler.state_dict), before)  # a check never changes
    try:
        s.load_state_dict(bad)
    except (StateError, TypeError, ValueError) as exc:
        assert str(exc)
        assert same(snapshot(s, gen.getstate, sampler.state_dict), before)


class Noted:
    """A participant whose checks and loads note the ``load`` they get (``None``: a direct call)."""

    seeder_kind = "noted"

    def __init__(self):
        self.got = []

    def seeder_reseed(self, seeder, task_id, epoch):
        pass

    def state_dict(self):
        return {"n": 1}

    def check_state_dict(self, state, load=None):
        self.got.append(("check", load))

    def load_state_dict(self, state, load=None):
        self.got.append(("load", load))


class Plain(Noted):
    """The same with the protocol's one-argument methods."""

    def check_state_dict(self, state):
        self.got.append(("check", "plain"))

    def load_state_dict(self, state):
        self.got.append(("load", "plain"))


def test_a_participant_gets_the_run_the_loaded_state_describes_as_an_argument():
    s = seeder.Seeder()
    s.init(1)
    s.join(Noted(), weak=False)
    s.join(Plain(), weak=False)
    s.reseed(1, 2)
    saved = s.state_dict()
    t = seeder.Seeder()
    t.init(7)
    noted, plain = Noted(), Plain()
    t.join(noted, weak=False)
    t.join(plain, weak=False)
    t.reseed(3, 4)
    t.check_state_dict(saved)
    t.load_state_dict(saved)
    run = LoadContext(master=1, last=(1, 2))
    assert noted.got == [("check", run), ("check", run), ("load", run)]
    assert plain.got == [("check", "plain")] * 2 + [("load", "plain")]
    assert not hasattr(t, "loading")  # no side channel on the seeder
    noted.load_state_dict(saved["participants"]["noted.0"])  # a direct call: the seeder's own run
    assert noted.got[-1] == ("load", None)


def test_an_elastic_state_of_another_world_and_master_seed_moves_into_a_run_inited_otherwise():
    """The moving loaders check their parts against the saved run, not the seed ``init`` got."""
    saved = two_rank_state()
    one = seeder.Seeder()
    one.init(5)
    one.register_generator(torch.Generator())
    moved = elastic(one, 1, 0)
    with pytest.warns(seeder.SeederWarning, match="checkpoint was made with 9"):
        one.load_state_dict(saved)
    fresh = seeder.Seeder()
    fresh.init(9)
    fresh.register_generator(torch.Generator())
    loader = elastic(fresh, 1, 0)
    fresh.reseed(1, 0)
    order = [b[:, 0].tolist() for b in loader]
    assert [b[:, 0].tolist() for b in moved] == order[2:]  # two global steps were done
