"""seeder verify on iteration-based scripts (no epochs) and the causes it names from seeder's step
records: a batch prefetched across the checkpoint, a resumed epoch discarded by a skip loop, another
run's checkpoint, a script that ran its own length. The slow tests run ``seeder verify`` on real
scripts (examples/nanogpt_port.py, tests/scripts/verify_causes.py)."""

from __future__ import annotations

import gc
import json
import sys

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, cli

import seeder
from seeder._errors import StateError
from seeder._run import steps as stepwatch
from seeder._seeding.default import default_seeder
from seeder.verify import VerifyConfig, verify
from seeder.verify._contract import Metrics
from seeder.verify._diagnose import foreign_resumes
from seeder.verify._seederstops import stop_steps
from seeder.verify._stepcauses import discarded_batches, prefetched

CAUSES = [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "verify_causes.py")]
NANOGPT = str(REPO_ROOT / "examples" / "nanogpt_port.py")


def metrics(keys, epochs):
    return Metrics([(k,) for k in keys], np.zeros(len(keys)), list(epochs))


def checks(report):
    return {c["name"]: c["status"] for c in report["checks"]}


# ------------------------------------------------------------------------------- stops and steps
def test_a_run_without_epochs_stops_at_two_steps_and_a_given_step_is_honoured():
    iters = metrics(range(1, 42), [0] * 41)  # reseed(0, 0) only: every step in "epoch" 0
    assert stop_steps(iters) == (
        (20, "step 20 of 41 (no epochs)"),
        (31, "step 31 of 41 (no epochs)"),
    )
    assert stop_steps(metrics(range(1, 42), [None] * 41))[0] == (
        20,
        "step 20 of 41 (no epochs)",
    )  # no reseed at all
    one_reseed = metrics(range(1, 13), [1] * 12)  # a single reseed(1, 1): no epoch boundary either
    assert stop_steps(one_reseed)[1] == (9, "step 9 of 12 (no epochs)")
    assert stop_steps(iters, given=25)[1] == (25, "given with --stop-after-steps")
    assert stop_steps(iters, given=101)[1] == (
        None,
        "--stop-after-steps 101 leaves no step after it: run (1) made 41 step(s)",
    )
    epochs = metrics(range(1, 13), [k // 6 for k in range(12)])
    assert stop_steps(epochs, given=4) == (
        (6, "the end of epoch 0"),
        (4, "given with --stop-after-steps"),
    )


def _iterations(path, resume):
    seeder.init(master_seed=11)
    seeder.reseed(0, 0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    ckpt = seeder.Checkpoint(path, model=model, optimizer=opt)
    ckpt.resume(resume)
    losses = []
    for _ in range(ckpt.steps, 10):  # as docs/verify.md: the loop starts at ckpt.steps
        x = torch.randn(4, 3)  # the batch, drawn inside its step
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ckpt.step()
        losses.append(loss.item())
    return losses, seeder.digest(model, opt)


def test_an_iteration_loop_resumes_at_ckpt_steps_and_its_records_count_draws(
    tool_hooks, tmp_path, fresh_default, monkeypatch
):
    steps = tmp_path / "steps.jsonl"
    monkeypatch.setenv(stepwatch.ENV_STEPS, str(steps))
    full, digest = _iterations(tmp_path / "a.pt", False)
    records = stepwatch.read_steps(steps)
    draws = [r["draws"]["torch"] for r in records if "loss" in r]
    # the first step follows reseed(0, 0) (no count across a reseed); then a batch and a dropout
    # mask each step
    assert draws[0] is None and len(set(draws[1:])) == 1 and draws[1] > 0
    assert {r["draws"]["numpy"] for r in records if "loss" in r} - {None} == {0}
    gc.collect()
    stepped = tmp_path / "stepped.jsonl"
    monkeypatch.setenv(stepwatch.ENV_STEPS, str(stepped))
    monkeypatch.setenv(stepwatch.ENV_STOP, "6")
    with pytest.raises(SystemExit):
        _iterations(tmp_path / "b.pt", False)
    gc.collect()
    monkeypatch.delenv(stepwatch.ENV_STOP)
    monkeypatch.setenv(stepwatch.ENV_RESUME, "1")
    rest, resumed = _iterations(tmp_path / "b.pt", None)
    assert rest == full[6:] and resumed == digest
    (loaded,) = stepwatch.read_loads(stepped)
    assert (loaded["at_step"], loaded["from"]) == (6, str(stepped))  # the run that wrote it
    assert (
        loaded["rngs"] == next(r for r in records if r.get("step") == 6)["rngs"]
    )  # the load put back step 6's RNGs
    again = [r for r in stepwatch.read_steps(stepped) if "loss" in r]
    assert [r["draws"] for r in again] == [
        r["draws"] for r in records if "loss" in r
    ]  # counted from the load too
    stepwatch.del_env()


def test_the_step_counter_state_names_its_run_and_refuses_bad_content():
    counter = stepwatch.StepCounter()
    counter.check_state_dict({"step": 3})  # written before runs were named: accepted
    counter.check_state_dict({"step": 3, "run": "/out/runs/half-0/steps.jsonl"})
    good = counter.state_dict()["rngs"]
    counter.check_state_dict({"step": 3, "rngs": good})
    zero_key, wide, far = good.clone(), good.clone(), good.clone()
    zero_key[1, :624] = 0
    wide[0, 5] = 1 << 32
    far[2, 624] = 625
    for bad in (
        {"step": 3, "run": 5},
        {"step": 3, "run": "x" * 5000},
        {"step": -1},
        {"step": 3, "other": 1},
        {"step": 3, "rngs": good.int()},
        {"step": 3, "rngs": good[:2]},
        {"step": 3, "rngs": zero_key},
        {"step": 3, "rngs": wide},
        {"step": 3, "rngs": far},
        {"step": 3, "rngs": [1, 2]},
    ):
        with pytest.raises(StateError, match="verify step counter"):
            counter.check_state_dict(bad)


def test_a_checkpoint_saved_outside_the_verify_session_is_refused_saying_so(
    tool_hooks, tmp_path, fresh_default, monkeypatch
):
    """A run under seeder verify that finds a checkpoint no run of the session wrote (the user's,
    mirrored into the run's folder) is refused with the cause and the fix, not the generic
    missing-participant message."""
    fresh_default.init(master_seed=3)
    outside = fresh_default.state_dict()  # saved by a run without seeder verify: no step counter
    default_seeder().reset()
    monkeypatch.setenv(stepwatch.ENV_STEPS, str(tmp_path / "steps.jsonl"))
    fresh_default.init(master_seed=3)
    with pytest.raises(StateError, match="not saved by a run of this seeder verify session") as err:
        fresh_default.load_state_dict(outside)
    assert "run seeder verify from a folder without it" in str(err.value)
    stepwatch.del_env()


# ---------------------------------------------------------------- causes, on their own records
def _steps(path, *records):
    path.mkdir(parents=True, exist_ok=True)
    (path / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_another_runs_checkpoint_is_named_with_the_fix(tmp_path):
    runs = tmp_path / "runs"
    _steps(runs / "half-0", {"step": 1, "loss": 0.0})
    _steps(
        runs / "resume-0",
        {"seeder_verify": "loaded", "at_step": 6, "from": str(runs / "half-0" / "steps.jsonl")},
    )
    _steps(
        runs / "full-1",
        {
            "seeder_verify": "loaded",
            "at_step": 18,
            "from": str(runs / "unseeded-0" / "steps.jsonl"),
        },
        {"seeder_verify": "resumed", "at_step": 18},
    )
    _steps(
        runs / "full-0", {"seeder_verify": "resumed", "at_step": 4}
    )  # a checkpoint written outside verify
    _steps(runs / "unseeded-0", {"step": 1, "loss": 0.0})
    found = foreign_resumes(tmp_path, ["half-0", "resume-0", "full-1", "full-0", "unseeded-0"])
    assert len(found) == 2
    assert found[0].startswith(
        "run full-1 resumed from a checkpoint that run unseeded-0 wrote (at step 18), not from "
        "one of its own"
    )
    assert "a path such as ../outputs" in found[0] and "--arg ckpt_dir=" in found[0]
    assert found[1].startswith(
        "run full-0 was not asked to resume, yet resumed from a checkpoint that an earlier run "
        "wrote (at step 4)"
    )
    # a resumed run continuing another repeat's stop is named too
    _steps(
        runs / "resume-1",
        {"seeder_verify": "loaded", "at_step": 6, "from": str(runs / "half-0" / "steps.jsonl")},
    )
    assert "that run half-0 wrote" in foreign_resumes(tmp_path, ["resume-1"])[0]


def test_a_discarded_resumed_epoch_is_named_with_the_warning_it_logged():
    full = metrics(range(1, 13), [0] * 6 + [1] * 6)
    stopped, trained = (
        metrics(range(1, 10), [0] * 6 + [1] * 3),
        metrics(range(10, 14), [1] + [2] * 3),
    )
    msg = discarded_batches(
        full, stopped, trained, "SeederWarning: 2 batches discarded; use loader.batches_done\n"
    )
    assert msg.startswith(
        "the resumed run (3b) trained 1 of the 3 step(s) left of epoch 1 "
        "((2b) had trained 3 of its 6)"
    )
    assert "enumerate(loader, start=loader.batches_done)" in msg
    assert msg.endswith("(its log: SeederWarning: 2 batches discarded; use loader.batches_done)")
    line = "/x/_discardwatch.py:93: SeederWarning: " + "w" * 500
    logged = discarded_batches(full, stopped, trained, line)
    assert logged.endswith("(its log: SeederWarning: " + "w" * 385 + "...)")  # its words, cut
    whole = metrics(range(10, 13), [1] * 3)
    assert discarded_batches(full, stopped, whole) is None  # every step left was trained
    assert (
        discarded_batches(full, metrics(range(1, 7), [0] * 6), whole) is None
    )  # stopped at the epoch's end
    assert discarded_batches(metrics(range(1, 13), [0] * 12), stopped, trained) is None  # no epochs


def _rec(step, draws, prints=None):
    return {
        "step": step,
        "loss": 0.0,
        "draws": {"torch": draws, "numpy": 0},
        "rngs": {"torch": prints or f"t{step}", "numpy": "n"},
    }


def test_a_prefetched_batch_is_told_from_other_extra_draws():
    full = [_rec(s, 30) for s in range(1, 9)]
    resumed = [
        {"seeder_verify": "loaded", "at_step": 4, "rngs": {"torch": "t4", "numpy": "n"}},
        _rec(5, 38),
        _rec(6, 30),
        _rec(7, 30),
    ]
    state, msg = prefetched(full, resumed)
    assert state == "prefetch" and "drew 8 number(s) more from it than step 5" in msg
    assert "Draw each step's batch at the start of the step" in msg
    not_restored = [dict(resumed[0], rngs={"torch": "other", "numpy": "n"})] + resumed[1:]
    assert (
        prefetched(full, not_restored) is None
    )  # the load did not put the RNG back: another cause
    drifting = resumed[:2] + [_rec(6, 31), _rec(7, 30)]
    assert prefetched(full, drifting) is None  # not one extra draw at the start
    seed_draw = [resumed[0], _rec(5, 32)] + resumed[2:]
    assert (
        prefetched(full, seed_draw)[0] == "iterator-seed"
    )  # 2 words: an iterator's seed, not a batch
    assert (
        prefetched(full, [resumed[0], _rec(5, 30)] + resumed[2:]) is None
    )  # drew as the uninterrupted run


# ---------------------------------------------------------------------- real scripts, verified
@pytest.fixture
def handed_off(handoff_kept, monkeypatch):
    """Each run verify starts hands its script to the session's handoff server (torch imported
    once), in CI too: these tests' subject is the cause verify names in the runs' step records,
    not the interpreters' start."""
    for name, value in handoff_kept.env().items():
        monkeypatch.setenv(name, value)
    return handoff_kept.env()


@pytest.mark.slow
def test_seeder_verify_passes_the_nanogpt_port_stopped_mid_run(
    capsys, tmp_path, handed_off, started_in_tmp
):
    """karpathy/nanoGPT's train.py ported (examples/nanogpt_port.py): no epochs, batches from
    torch.randint; seeder stops it at step 20 of 41 and at the given step 25 and resumes it through
    seeder.Checkpoint, iter_num from ckpt.steps. Its configurator has no parser: no flag of
    verify's is passed, no --arg needed."""
    rc, out, err = cli(
        capsys,
        [
            "verify",
            "--out",
            str(tmp_path / "v"),
            "--epochs",
            "2",
            "--repeats",
            "2",
            "--resume-repeats",
            "1",
            "--jobs",
            "2",
            "--stop-after-steps",
            "25",
            "--no-figures",
            "--no-progress",
            "--",
            sys.executable,
            NANOGPT,
        ],
    )
    assert rc == 0, out + err[-3000:]
    print(out)  # verify's table, for the record
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "PASS",
        "variance": "PASS",
    }
    runs = {r["name"]: r for r in rep["runs"]}
    assert (runs["half-0"]["stop_after_steps"], runs["half-0"]["stop_where"]) == (
        20,
        "step 20 of 41 (no epochs)",
    )
    assert (runs["mid-0"]["stop_after_steps"], runs["mid-0"]["stop_where"]) == (
        25,
        "given with --stop-after-steps",
    )
    summary = {c["name"]: c["summary"] for c in rep["checks"]}
    assert summary["resume-mid-epoch"].startswith(
        "stopped at step 25 of 41 (no epochs): resumed runs bitwise identical"
    )
    assert "the script ran its own 41 steps (no epochs)" in summary["reproducible"]
    assert runs["full-0"]["digest"] == runs["resume-0"]["digest"] == runs["resume-mid-0"]["digest"]


def _verify(tmp_path, bug):
    return verify(
        VerifyConfig(
            command=CAUSES + ["--bug", bug],
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,
            jobs=2,
            progress=False,
            figures=False,
        )
    )


@pytest.mark.slow
def test_verify_names_a_batch_prefetched_across_the_checkpoint(
    tmp_path, handed_off, started_in_tmp
):
    rep = _verify(tmp_path, "prefetch")
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "FAIL",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    for check in ("resume", "resume-mid-epoch"):
        diagnosis = next(c for c in rep["checks"] if c["name"] == check)["details"]["repeats"][0][
            "diagnosis"
        ]
        assert diagnosis["state"] == "prefetch", diagnosis
    assert (
        "torch's global RNG was restored as it was after step 12, yet the resumed run's first step "
        "drew 8 "
        "number(s) more from it than step 13"
    ) in rep["reasons"][0]  # a batch of 8 indices, drawn twice
    assert "a batch prefetched across the checkpoint" in rep["reasons"][0]
    assert "the checkpoint does not restore everything" not in " ".join(rep["reasons"])


@pytest.mark.slow
def test_verify_names_a_resumed_epoch_discarded_by_a_skip_loop(
    tmp_path, handed_off, started_in_tmp
):
    rep = _verify(tmp_path, "skip-loop")
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    assert (
        "the resumed run (3b) trained 0 of the 3 step(s) left of epoch 1 "
        "((2b) had trained 3 of its 6)" in rep["reasons"][0]
    ) and "enumerate(loader, start=loader.batches_done)" in rep["reasons"][0]
    # the script takes no --epochs: the table says it ran its own 3
    reproducible = next(c for c in rep["checks"] if c["name"] == "reproducible")["summary"]
    assert reproducible.endswith(
        "(the script ran its own 3 epochs: it takes no --epochs, so --epochs 2 was not passed)"
    )


@pytest.mark.slow
def test_verify_names_a_run_that_continued_another_runs_checkpoint(
    tmp_path, handed_off, started_in_tmp
):
    rep = _verify(tmp_path, "shared-ckpt")
    assert rep["verdict"] == "FAIL"
    named = [r for r in rep["reasons"] if "resumed from a checkpoint that run " in r]
    assert named, rep["reasons"]
    assert "a path such as ../outputs" in named[0] and "--arg ckpt_dir=" in named[0]


@pytest.mark.slow
def test_verify_names_a_loader_iterated_again_with_no_reseed(tmp_path, handed_off, started_in_tmp):
    rep = _verify(tmp_path, "no-reseed")
    assert checks(rep)["resume"] == "FAIL" and checks(rep)["resume-mid-epoch"] == "FAIL"
    for check in ("resume", "resume-mid-epoch"):
        found = next(c for c in rep["checks"] if c["name"] == check)
        assert found["details"]["repeats"][0]["diagnosis"]["state"] == "reseed"
        (reason,) = found["reasons"]
        assert (
            "a seeder.DataLoader was iterated again in epoch 0 with no seeder.reseed(1, epoch)"
            in reason
        ) and reason.endswith(
            "Call seeder.reseed(1, epoch) at the start of each epoch, before iterating the loader"
        )
    reproducible = next(c for c in rep["checks"] if c["name"] == "reproducible")["summary"]
    assert (
        "18 steps (no epochs: its seeder.DataLoader was iterated again with no "
        "seeder.reseed(1, epoch))" in reproducible
    )
