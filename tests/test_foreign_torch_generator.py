"""A reseed of torch's default generator through its own methods after seeder.init
(``torch.default_generator.manual_seed(5)``, ``.seed()``): no wrapper sees the call, so seeder finds
it from ``torch.initial_seed()`` at the next moment it looks (a reseed, a state taken) and warns
once per run, naming the call and the fix. Seeder's own seeding and restores, a watched call and a
block that puts the generator back are no reseed behind its back."""

import logging
import warnings

import pytest
import torch

import seeder
from seeder._errors import SeederWarning


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, SeederWarning)]


@pytest.fixture
def run(fresh_default):
    def start(master=4):
        fresh_default.init(master_seed=master)
        fresh_default.reseed(0, 0)
        return fresh_default

    return start


CALLS = {
    "manual_seed": (lambda: torch.default_generator.manual_seed(5), "manual_seed(5) (or"),
    "seed": (lambda: torch.default_generator.seed(), "torch.default_generator.seed() (or"),
}
MOMENTS = {  # a new epoch at each look: a repeated reseed warns of its own
    "reseed": (lambda epoch: seeder.reseed(1, epoch), "found at seeder.reseed(1, 1)"),
    "state_dict": (lambda epoch: seeder.state_dict(), "found at seeder.state_dict()"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("moment", sorted(MOMENTS))
def test_a_reseed_through_the_generator_itself_is_found_and_warned_once(run, call, moment, caplog):
    run()
    reseed, named = CALLS[call]
    look, where = MOMENTS[moment]
    reseed()
    seed = torch.initial_seed()
    caught = _caught(lambda: look(1))
    assert len(caught) == 1, caught
    message = caught[0]
    assert named in message and where in message and f"initial seed to {seed}" in message
    assert f"depends on seed {seed}, not on master seed 4" in message
    assert "remove the call" in message and "torch.Generator().manual_seed" in message
    assert _caught(lambda: look(2)) == []  # found once: the next look has nothing new
    torch.default_generator.manual_seed(6)  # once per run: a second one is logged
    with caplog.at_level(logging.INFO, logger="seeder"):
        assert _caught(lambda: look(3)) == []
    assert "torch's default generator was reseeded" in caplog.text
    run()  # a new run warns again
    reseed()
    assert len(_caught(lambda: look(1))) == 1


def test_what_seeder_sees_or_puts_back_is_no_reseed_behind_its_back(run):
    """Seeder's reseeds, loads and loaders, watched calls (warned where they are), fork_rng blocks
    and a state the user puts back: not one warning at the moments seeder looks."""
    s = run()
    saved = seeder.state_dict()

    def quiet():
        with torch.random.fork_rng():
            torch.default_generator.manual_seed(9)
        with seeder.fork_rng():
            torch.default_generator.seed()
        state = torch.get_rng_state()
        torch.default_generator.manual_seed(11)
        torch.set_rng_state(state)  # the seed comes back with the state
        seeder.reseed(1, 0)
        seeder.load_state_dict(saved)
        seeder.reseed(1, 1)
        loader = seeder.DataLoader(torch.arange(8.0), batch_size=2, shuffle=True)
        for _ in loader:  # 0 workers: each batch is seeded in this process, then put back
            torch.rand(1)
        seeder.state_dict()

    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        quiet()
    caught = _caught(lambda: torch.seed())  # watched: warned where it is called ...
    assert len(caught) == 1 and caught[0].startswith("torch.seed()")
    assert _caught(lambda: s.reseed(1, 2)) == []  # ... and not found again later


def test_allow_lets_the_generator_be_reseeded_without_a_warning(run, monkeypatch):
    run()
    monkeypatch.setenv("SEEDER_FOREIGN_SEEDING", "allow")
    torch.default_generator.manual_seed(5)
    assert _caught(lambda: seeder.reseed(1, 0)) == []
