"""seeder.load_state_dict before the loaders exist: each loader and generator takes its part when it
is built."""

import random

import pytest
import torch
from helpers import run_python

import seeder
from seeder._errors import StateError


class Noisy(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.tensor(float(i)) + torch.rand(()) + random.random()


def _build(s, gen):
    loader = seeder.DataLoader(Noisy(), batch_size=4, shuffle=True, num_workers=0, seeder=s)
    s.register_generator(gen)
    return loader


def _run_to(s, gen, stop):
    """Epochs 0-1; returns (batches after the stop, the state at the stop)."""
    loader = _build(s, gen)
    after, saved = [], None
    for epoch in range(2):
        s.reseed(1, epoch)
        for i, batch in enumerate(loader):
            if saved is not None:
                after.append((batch, gen.random(), torch.rand(())))
            elif (epoch, i) == stop:
                saved = s.state_dict()
    return after, saved


def test_load_before_the_loader_exists_resumes_bit_for_bit():
    a = seeder.Seeder()
    a.init(master_seed=21)
    expected, saved = _run_to(a, random.Random(), (1, 2))  # batch 2 of 6 in epoch 1
    b = seeder.Seeder()
    b.init(master_seed=21)
    b.load_state_dict(saved)  # before any loader or generator
    assert b.pending.names() == ["seeder.DataLoader loader.0", "registered generator 1"]
    gen = random.Random()
    loader = _build(b, gen)
    assert b.pending.names() == []
    got = []
    for epoch in range(b.last_reseed[1], 2):
        b.reseed(1, epoch)
        got += [(batch, gen.random(), torch.rand(())) for batch in loader]
    assert len(got) == len(expected) == 3
    assert all(
        torch.equal(x[0], y[0]) and x[1] == y[1] and torch.equal(x[2], y[2])
        for x, y in zip(got, expected)
    )


def test_unclaimed_parts_and_extra_loaders_are_named():
    a = seeder.Seeder()
    a.init(master_seed=2)
    _, saved = _run_to(a, random.Random(), (0, 1))
    b = seeder.Seeder()
    b.init(master_seed=2)
    b.load_state_dict(saved)
    with pytest.raises(
        StateError,
        match=r"seeder.reseed\(1, 0\): .*seeder.DataLoader loader.0, registered generator 1",
    ):
        b.reseed(1, 0)
    with pytest.raises(StateError, match="seeder.DataLoader loader.0"):
        b.state_dict()
    c = seeder.Seeder()
    c.init(master_seed=2)
    loaders = [_build(c, random.Random()), seeder.DataLoader(Noisy(), batch_size=4, seeder=c)]
    with pytest.raises(
        StateError,
        match="this process has seeder.DataLoader loader.1 but the checkpoint holds no "
        "state for it",
    ) as err:
        c.load_state_dict(saved)
    assert "] registered" not in str(
        err.value
    )  # loaders by name, not a list of "registered" things
    assert loaders and c.pending.names() == []


def test_a_part_for_a_sampler_never_built_waits_then_fails_at_the_loop():
    a = seeder.Seeder()
    a.init(master_seed=4)
    a.reseed(1, 0)
    saved = a.state_dict()
    saved["participants"]["sampler.0"] = {"epoch": 0}
    a.load_state_dict(saved)
    assert a.pending.names() == ["seeder.DistributedSampler sampler.0"]
    with pytest.raises(
        StateError, match="seeder.DistributedSampler sampler.0, which this process has not built"
    ):
        a.reseed(1, 1)


def test_a_checkpoint_written_under_seeder_verify_resumes_outside_it():
    """Under ``seeder verify`` a step counter joins the seeder and its count travels in the
    checkpoint; outside verify nothing claims that part, and it must neither wait nor fail."""
    from seeder._run.steps import StepCounter

    s = seeder.Seeder()
    s.init(5)
    gen = random.Random()
    s.register_generator(gen)
    counter = StepCounter()
    counter.step = 7
    s.join(counter)
    s.reseed(1, 0)
    saved = s.state_dict()
    assert "verify_steps.0" in saved["participants"]
    want = gen.random()

    again = seeder.Seeder()
    again.init(5)
    gen2 = random.Random()
    again.register_generator(gen2)
    again.load_state_dict(saved)
    assert gen2.random() == want
    again.reseed(1, 1)  # no part waits for a step counter: the training loop goes on
    assert "verify_steps.0" not in again.state_dict()["participants"]


def test_a_checkpoint_written_under_seeder_verify_resumes_in_a_plain_process(tmp_path):
    """A fresh plain interpreter never loads the tool that added the step counter: the part
    names its tool, is left out, and nothing waits for it."""
    from seeder._run.steps import StepCounter

    s = seeder.Seeder()
    s.init(5)
    s.join(StepCounter())
    s.reseed(1, 0)
    torch.save(s.state_dict(), tmp_path / "state.pt")
    code = (
        "import sys, torch, seeder; seeder.init(5); "
        f"seeder.load_state_dict(torch.load({str(tmp_path / 'state.pt')!r}, weights_only=True)); "
        "seeder.reseed(1, 1); print([m for m in sys.modules if m.startswith('seeder._run')])"
    )
    assert run_python(["-c", code]).stdout.strip() == "[]"
