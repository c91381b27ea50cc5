"""What verify's verdict covers beyond the per-step values: the attributes of the script's plain
objects after each step, and the files only one of two runs leaves."""

from __future__ import annotations

import dataclasses
import json
import sys
from argparse import Namespace

import pytest
import torch
from helpers import REPO_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from optional import need, need_verify

from seeder._run.objects import MAX_ATTRIBUTES, digests, objects_in

need_verify(figures=False)
from seeder.verify import VerifyConfig, verify  # noqa: E402
from seeder.verify._leftovers import judge_leftovers  # noqa: E402


class EMA:
    """An EMA of the user's: tensors and numbers, no state_dict."""

    def __init__(self, model: torch.nn.Module, decay: float = 0.9):
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.decay = decay
        self.start_time = 1234.5  # a time: differs between runs by design
        self.copy = torch.nn.Linear(2, 2)  # a module no variable names
        self.update = print  # a callable
        self.label = "ema"  # neither tensor nor number


@dataclasses.dataclass
class Running:
    loss: torch.Tensor
    count: int = 0


class Meter:
    """Numbers only (printed averages): left out."""

    def __init__(self):
        self.sum, self.count = 0.0, 0


def test_a_plain_objects_tensor_number_and_module_attributes_are_compared_by_name():
    model = torch.nn.Linear(2, 1)
    ema, run = EMA(model), Running(torch.zeros(()))
    found = objects_in(
        {
            "model": model,
            "ema": ema,
            "run": run,
            "meter": Meter(),
            "args": Namespace(x=torch.ones(1)),
        }
    )
    assert sorted(found) == [
        "ema.copy",
        "ema.decay",
        "ema.shadow",
        "model",
        "run.count",
        "run.loss",
    ]
    states = digests(found)
    assert states["ema.shadow"].startswith("dict attribute of EMA:")
    assert states["run.loss"].startswith("tensor attribute of Running:")
    assert states["ema.copy"].startswith("nn.Module Linear:")
    before = states["ema.shadow"]
    ema.shadow["weight"].add_(1)
    after = digests(objects_in({"ema": ema}))
    assert after["ema.shadow"] != before and after["ema.decay"] == states["ema.decay"]


def test_a_module_a_variable_names_keeps_its_name_and_attributes_are_bounded():
    model = torch.nn.Linear(2, 1)
    holder = Running(torch.zeros(()))
    holder.model = model  # the same module as a variable: compared once, as 'model'
    found = objects_in({"holder": holder, "model": model})
    assert "model" in found and "holder.model" not in found
    many = Running(torch.zeros(()))
    for i in range(MAX_ATTRIBUTES + 10):
        setattr(many, f"a{i:03d}", float(i))
    assert len(objects_in({"many": many})) == MAX_ATTRIBUTES


@settings(max_examples=25, deadline=None)
@given(
    st.permutations(["a", "b", "c", "d"]), st.lists(st.floats(-1e3, 1e3), min_size=4, max_size=4)
)
def test_attribute_digests_do_not_depend_on_the_order_they_were_set(order, values):
    by_name = dict(zip("abcd", values))
    one, two = Running(torch.tensor(values)), Running(torch.tensor(values))
    for name in "abcd":
        setattr(one, name, by_name[name])
    for name in order:
        setattr(two, name, by_name[name])
    first, second = objects_in({"r": one}), objects_in({"r": two})
    assert list(first) == list(second) and digests(first) == digests(second)


# --- files only one run leaves
# ---------------------------------------------------------------------------------------


def _runs(tmp_path, files):
    """Run folders with their files (``{run: {path: text}}``), every run recording one step."""
    for run, written in files.items():
        folder = tmp_path / "runs" / run
        folder.mkdir(parents=True)
        (folder / "steps.jsonl").write_text(json.dumps({"step": 1, "state": {}}) + "\n")
        for rel, text in written.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    checks = [{"name": n, "status": "PASS", "summary": "", "reasons": []} for n in ("resume",)]
    return {"checks": checks}


def test_a_file_only_the_resumed_run_writes_is_a_fail_naming_it(tmp_path):
    report = _runs(
        tmp_path,
        {
            "full-0": {"out.txt": "1"},
            "half-0": {"out.txt": "1", "ckpt/last.pt": "c"},
            "resume-0": {"out.txt": "1", "ckpt/last.pt": "c", "resumed.txt": "from step 6"},
        },
    )
    judge_leftovers(report, tmp_path, repeats=1, resume_runs=1)
    (check,) = report["checks"]
    assert check["status"] == "FAIL"
    assert check["reasons"] == [
        "repeat 0: the resumed run (3) leaves resumed.txt, which the uninterrupted run (1) does "
        "not write: the run writes another file after a resume (a file that differs by design, "
        "a log of times or of the resume, is left out with --ignore-output 'resumed.txt')"
    ]
    assert "resumed.txt is left by the resumed run only" in check["summary"]


def test_the_stopped_runs_checkpoint_in_the_resumed_run_is_a_named_leftover_not_a_fail(tmp_path):
    report = _runs(
        tmp_path,
        {
            "full-0": {"out.txt": "1"},
            "half-0": {"out.txt": "1", "ckpt/last.pt": "c"},
            "resume-0": {"out.txt": "1", "ckpt/last.pt": "c", "resumed.txt": "x"},
        },
    )
    judge_leftovers(report, tmp_path, repeats=1, resume_runs=1, ignore=["resumed.txt"])
    assert report["checks"][0]["status"] == "PASS"
    assert report["compared"]["left_out"]["ckpt/last.pt"].startswith(
        "left only by the resumed runs, which start from a copy of their stopped run's folder"
    )


# --- end to end: an EMA of the user's own that the checkpoint leaves out
# ---------------------------------------------------------------------------------------


@pytest.fixture
def handed_off(handoff_kept, monkeypatch):
    """Each run verify starts hands its script to the session's handoff server (torch imported
    once): the subject is what verify compares, not the interpreters' start."""
    for name, value in handoff_kept.env().items():
        monkeypatch.setenv(name, value)


@pytest.mark.slow
def test_a_plain_ema_the_checkpoint_leaves_out_fails_naming_its_attribute(
    tmp_path, handed_off, started_in_tmp
):
    script = REPO_ROOT / "tests" / "scripts" / "verify_plain_ema.py"
    rep = verify(
        VerifyConfig(
            command=[sys.executable, str(script), "--bug", "no-ema"],
            out=tmp_path / "v",
            repeats=2,
            resume_repeats=1,
            jobs=2,
            progress=False,
            figures=False,
            mid_epoch=False,
        )
    )
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["reproducible"]["status"] == "PASS" and checks["resume"]["status"] == "FAIL"
    assert checks["resume"]["reasons"] == [
        "repeat 0: the resumed run (3) differs from the uninterrupted run (1) in 'ema.shadow' "
        "(dict attribute of EMA) from step 7 on (resumed after step 6): the checkpoint does not "
        "save or restore it, or the loop changes it after a resume"
    ]
    assert rep["compared"]["objects"]["ema.shadow"] == "dict attribute of EMA"


class Samples(torch.utils.data.Dataset):
    """A dataset of the user's: the data, not the training's state."""

    def __init__(self):
        self.x = torch.randn(8, 2)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i]


def test_a_dataset_of_the_users_is_not_compared_after_each_step():
    assert objects_in({"train_set": Samples()}) == {}


# --- under Lightning: each optimizer step records the trainer's objects
# ---------------------------------------------------------------------------------------


class _Counted:
    """A callback giving the module a non-persistent buffer that counts the steps: no checkpoint
    holds it, so a resumed run's count starts again at 0."""

    def __new__(cls):
        import lightning.pytorch as pl

        class Counted(pl.Callback):
            def on_fit_start(self, trainer, pl_module):
                pl_module.register_buffer("seen", torch.zeros(()), persistent=False)

            def on_train_batch_end(self, trainer, pl_module, *args):
                pl_module.seen += 1

        return Counted()


@pytest.mark.slow  # three fits in this process
def test_each_lightning_step_records_the_trainers_objects_and_a_lost_buffer_is_named(
    tmp_path, monkeypatch, fresh_default, tool_hooks
):
    need("lightning")
    import gc

    monkeypatch.syspath_prepend(str(REPO_ROOT / "tests" / "scripts"))
    from lightning_common import run, seeder_loader

    from seeder._run import steps as stepwatch
    from seeder.integrations.lightning import SeederCallback, resume_path
    from seeder.verify._states import first_difference, read_states

    def fit(steps, **env):
        monkeypatch.setenv(stepwatch.ENV_STEPS, str(tmp_path / steps))
        monkeypatch.setenv(stepwatch.ENV_CKPT_DIR, str(tmp_path / "ckpt"))
        for name in (stepwatch.ENV_STOP, stepwatch.ENV_RESUME):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        loader = lambda: seeder_loader(workers=0)  # noqa: E731
        cbs = [SeederCallback(), _Counted()]
        try:
            run(3, loader_factory=loader, callbacks=cbs, ckpt_path=resume_path())
        finally:
            gc.collect()

    try:
        fit("full.jsonl")
        with pytest.raises(SystemExit):
            fit("stopped.jsonl", **{stepwatch.ENV_STOP: "4"})
        fit("stopped.jsonl", **{stepwatch.ENV_RESUME: "1"})
    finally:
        stepwatch.del_env()
    full, resumed = read_states(tmp_path / "full.jsonl"), read_states(tmp_path / "stopped.jsonl")
    assert sorted(full) == list(range(1, 13)) and sorted(resumed) == list(range(1, 13))
    assert set(full[1]) == {"model", "optimizers[0]"}
    assert full[1]["model"].startswith("nn.Module Net:")
    # the weights and the optimizer resume exactly; the uncheckpointed buffer does not
    assert all(full[s]["optimizers[0]"] == resumed[s]["optimizers[0]"] for s in full)
    assert first_difference(full, resumed) == (5, "model", "nn.Module Net: its buffers")


@pytest.mark.slow  # a Trainer run in this process
def test_each_hugging_face_trainer_step_records_the_trainers_objects(
    tmp_path, monkeypatch, fresh_default, tool_hooks
):
    need("transformers")
    import gc

    monkeypatch.syspath_prepend(str(REPO_ROOT / "tests" / "scripts"))
    from hf_trainer_run import run

    from seeder._run import steps as stepwatch
    from seeder._seeding.default import default_seeder
    from seeder.verify._states import read_states

    monkeypatch.setenv(stepwatch.ENV_STEPS, str(tmp_path / "steps.jsonl"))
    try:
        run(str(tmp_path / "out"), seeder_obj=default_seeder(), epochs=1, workers=0)
    finally:
        stepwatch.del_env()
        gc.collect()
    states = read_states(tmp_path / "steps.jsonl")
    assert sorted(states) == list(range(1, len(states) + 1)) and len(states) > 2
    assert set(states[1]) == {"model", "optimizer", "lr_scheduler"}
    assert states[1]["model"].startswith("nn.Module Tiny:") and states[1] != states[2]
