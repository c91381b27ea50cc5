"""The participant protocol: one key function for states and traces, the optional Stands and
Positioned parts."""

from __future__ import annotations

import random
import warnings

import pytest
import torch

import seeder
from seeder._run import trace
from seeder._seeding.default import check_seeder, resolve_seeder
from seeder._seeding.participant import Participant, Positioned, Stands


class Noise:
    """A participant written from the Participant protocol alone."""

    seeder_kind = "noise"

    def __init__(self):
        self.rng = random.Random()

    def seeder_reseed(self, s, task_id, epoch):
        self.rng.seed(s.get_seed(task_id, epoch, stream=99))

    def state_dict(self):
        return {"state": list(self.rng.getstate()[1])}

    def check_state_dict(self, state):
        pass

    def load_state_dict(self, state):
        self.rng.setstate((3, tuple(state["state"]), None))


class Stand(Noise):
    def __init__(self, target):
        super().__init__()
        self.seeder_target = target


def test_state_and_trace_name_participants_the_same_way():
    s = seeder.Seeder()
    s.init(5)
    sampler = seeder.DistributedSampler(range(8), seeder=s)
    loader = seeder.DataLoader(torch.arange(8), batch_size=2, shuffle=True, seeder=s)
    s.register_generator(random.Random())
    s.register_generator(print)  # keeps no state: traced, not saved
    noise = Noise()
    s.join(noise)
    s.reseed(1, 0)
    with pytest.warns(seeder.SeederWarning, match="plain callable with no state"):
        saved = set(s.state_dict()["participants"])
    traced = trace.state_fingerprints(s)["participants"]
    assert saved == {"sampler.0", "loader.0", "generator.1", "noise.0"}
    assert set(traced) == saved | {"generator.2"} and traced["generator.2"] is None
    assert isinstance(noise, Participant) and not isinstance(noise, Positioned)
    del sampler, loader


def test_positioned_participants_report_without_side_effects():
    s = seeder.Seeder()
    s.init(5)
    s.reseed(1, 0)
    sampler = seeder.DistributedSampler(range(12), seeder=s)
    plain = torch.utils.data.DataLoader(
        range(12),
        batch_size=4,
        sampler=sampler,
        generator=seeder.data.dataloader_generator(seeder=s),
    )
    next(iter(plain))  # drawn, never advance()d: state_dict() would warn once
    loader = seeder.DataLoader(torch.arange(12), batch_size=4, shuffle=True, seeder=s)
    it = iter(loader)
    next(it)
    assert isinstance(sampler, Positioned) and isinstance(loader, Positioned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sampler.seeder_position() == {"epoch": 0, "position": 0}
        assert trace.state_fingerprints(s)["positions"]["loader.0"] == {"epoch": 0, "position": 4}
    assert loader.seeder_position()["position"] == loader.state_dict()["position"]
    with pytest.warns(seeder.SeederWarning, match="no sample was reported consumed"):
        sampler.state_dict()  # the warning was not used up by the trace


def test_a_standing_participant_is_found_through_its_target():
    s = seeder.Seeder()
    s.init(1)
    target = object()
    stand = Stand(target)
    s.register_generator(stand)
    assert isinstance(stand, Stands) and s.registry.find(target) is stand
    s.unregister_generator(target)
    assert stand not in s.participants()


@pytest.mark.parametrize("bad", [3, "seeder", object()])
def test_one_message_for_a_wrong_seeder(bad):
    for call in (
        lambda: resolve_seeder(bad),
        lambda: check_seeder(bad),
        lambda: seeder.DistributedSampler(range(4), seeder=bad),
        lambda: seeder.DataLoader(range(4), seeder=bad),
        lambda: seeder.data.SeededDataset(range(4), seeder=bad),
        lambda: seeder.data.dataloader_generator(seeder=bad),
    ):
        with pytest.raises(
            TypeError, match=r"^seeder must be a seeder.Seeder or None \(the default seeder\), got "
        ):
            call()


def test_a_plain_callable_refuses_a_state_to_check_or_load():
    """A registered function keeps no state: checking and loading one are the same StateError."""
    s = seeder.Seeder()
    s.init(5)
    s.register_generator(lambda seed: None)
    (generator,) = s.generators()
    for method in (generator.check_state_dict, generator.load_state_dict):
        with pytest.raises(seeder.StateError, match="plain callable with no state to load"):
            method({})
