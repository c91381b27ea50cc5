"""SeederTrainer: a real transformers.Trainer on a tiny model, 2 workers, random augmentation; exact
resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

import seeder  # noqa: E402
from seeder._errors import StateError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "scripts"))
from helpers import torchrun  # noqa: E402
from hf_trainer_run import run  # noqa: E402

pytestmark = pytest.mark.xdist_group("transformers")  # one worker builds the module's runs

STEPS_PER_EPOCH = 12  # 96 items, batch 8


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return run(str(tmp_path_factory.mktemp("full")))


@pytest.mark.slow
def test_seeded_repeat_is_identical(full, tmp_path):
    losses, dig = run(str(tmp_path))
    assert losses == full[0] and dig == full[1]
    assert len(losses) == 2 * STEPS_PER_EPOCH


@pytest.mark.slow
@pytest.mark.parametrize("stop", [5, STEPS_PER_EPOCH, 17])
def test_resume_mid_epoch_and_at_boundary_is_bitwise(full, tmp_path, stop):
    first, _ = run(str(tmp_path), stop=stop)
    assert sorted(first) == list(range(1, stop + 1))
    folder = tmp_path / f"checkpoint-{stop}"
    state = torch.load(folder / "seeder_state_0.pt", weights_only=True)  # plain values only
    assert state["participants"]["loader.0"]["batch"] == (stop - 1) % STEPS_PER_EPOCH + 1
    rest, dig = run(str(tmp_path), resume=True)
    assert min(rest) == stop + 1
    assert {**first, **rest} == full[0]
    assert dig == full[1]


def test_bad_seeder_state_raises_before_anything_changes(full, tmp_path):
    run(str(tmp_path), stop=3, workers=0)
    path = tmp_path / "checkpoint-3" / "seeder_state_0.pt"
    state = torch.load(path, weights_only=True)
    state["participants"]["loader.0"]["batch_size"] = 4
    torch.save(state, path)
    with pytest.raises(StateError, match="batch_size=4"):
        run(str(tmp_path), resume=True, workers=0)
    os.remove(path)
    with pytest.raises(StateError, match="seeder_state_0.pt missing"):
        run(str(tmp_path), resume=True, workers=0)


def test_unsupported_arguments_are_named(tmp_path):
    from hf_common import Augmented, Tiny
    from transformers import TrainingArguments

    from seeder.integrations.transformers import SeederTrainer

    args = TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, ignore_data_skip=True
    )
    with pytest.raises(ValueError, match="ignore_data_skip"):
        SeederTrainer(model=Tiny(), args=args, train_dataset=Augmented(), seeder=seeder.Seeder())
    with pytest.raises(TypeError, match="seeder must be"):
        SeederTrainer(model=Tiny(), args=args, train_dataset=Augmented(), seeder=42)


def test_import_seeder_loads_no_framework():
    code = (
        "import sys, seeder; seeder.init(1); seeder.reseed(1, 0); import seeder.integrations; "
        "print('transformers' in sys.modules, 'accelerate' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.slow
def test_two_processes_resume_mid_epoch(tmp_path):
    proc = torchrun(
        [os.path.join(HERE, "scripts", "hf_trainer_run.py"), str(tmp_path), "4"],
        timeout=240,
        frameworks=True,
    )[0]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    (full, full_digest), (first, _), (rest, dig) = json.loads(line[len("RESULT ") :])
    assert (
        len(full) == STEPS_PER_EPOCH
    )  # each rank takes half of every epoch: 6 steps an epoch, 2 epochs
    assert sorted(os.listdir(tmp_path / "run" / "checkpoint-4")).count("seeder_state_1.pt") == 1
    assert min(map(int, rest)) == 5
    assert {**first, **rest} == full
    assert dig == full_digest
