"""SeederAccelerator: a prepared seeder.DataLoader keeps order and position; save_state/load_state
resume exactly."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytest.importorskip("accelerate")

import seeder  # noqa: E402
from seeder._errors import StateError  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts"))
from hf_common import Augmented, Tiny  # noqa: E402

pytestmark = pytest.mark.xdist_group("accelerate")  # one worker builds the module's runs

EPOCHS, STEPS = 2, 12  # 96 items, batch 8


def train(ckpt, stop=None, resume=False, workers=2):
    """A custom accelerate loop; returns {step: loss}, the digest, and the prepared loader."""
    from seeder.integrations.accelerate import PreparedLoader, SeederAccelerator

    s = seeder.Seeder()
    s.init(42)
    acc = SeederAccelerator(cpu=True, seeder=s)
    s.reseed(0, 0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = seeder.DataLoader(
        Augmented(), batch_size=8, shuffle=True, num_workers=workers, seeder=s
    )
    model, opt, prepared = acc.prepare(model, opt, loader)
    assert isinstance(prepared, PreparedLoader) and prepared.loader is loader
    step, start, losses = 0, 0, {}
    if resume:
        acc.load_state(ckpt)
        start = s.last_reseed[1]
        step = start * STEPS + loader.state_dict()["batch"]
    for epoch in range(start, EPOCHS):
        s.reseed(1, epoch)
        for batch in prepared:
            loss = model(**batch)["loss"]
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            step += 1
            losses[step] = loss.item()
            if step == stop:
                acc.save_state(ckpt)
                return losses, seeder.digest(model, opt), prepared
    return losses, seeder.digest(model, opt), prepared


@pytest.fixture(scope="module")
def full():
    return train(None)[:2]


@pytest.mark.slow
@pytest.mark.parametrize("stop", [5, STEPS, 19])
def test_save_state_load_state_resume_is_bitwise(full, tmp_path, stop):
    first, _, _ = train(str(tmp_path), stop=stop)
    state = torch.load(tmp_path / "seeder_state_0.pt", weights_only=True)
    assert state["participants"]["loader.0"]["batch"] == (stop - 1) % STEPS + 1
    rest, dig, _ = train(str(tmp_path), resume=True)
    assert min(rest) == stop + 1
    assert {**first, **rest} == full[0]
    assert dig == full[1]


@pytest.mark.slow
def test_seeded_repeat_is_identical(full):
    assert train(None)[:2] == full


def test_prepared_loader_marks_epoch_end_and_skip_is_o1(tmp_path):
    from seeder.integrations.accelerate import SeederAccelerator, load_checkpoint_state

    _, _, prepared = train(str(tmp_path), stop=3, workers=0)
    acc = prepared.gradient_state
    flags = [
        acc.end_of_dataloader for _ in prepared
    ]  # a new pass of the same epoch starts at batch 0
    assert len(flags) == STEPS and flags[-1] and not any(flags[:-1])
    load_checkpoint_state(str(tmp_path), prepared.loader.seeder)  # back to batch 3
    sa = SeederAccelerator(cpu=True, seeder=prepared.loader.seeder)
    with pytest.raises(ValueError, match="stands at batch 3"):
        sa.skip_first_batches(prepared, 2)
    assert sa.skip_first_batches(prepared, 3) is prepared
    flags = [acc.end_of_dataloader for _ in prepared]
    assert len(flags) == STEPS - 3 and flags[-1] and not any(flags[:-1])


def test_bad_state_raises_before_accelerate_loads(tmp_path):
    train(str(tmp_path), stop=3, workers=0)
    path = tmp_path / "seeder_state_0.pt"
    state = torch.load(path, weights_only=True)
    state["master_seed"] = "x"
    torch.save(state, path)
    with pytest.raises(StateError, match="nothing was changed"):
        train(str(tmp_path), resume=True, workers=0)
