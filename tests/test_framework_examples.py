"""The framework examples (examples/lightning_train.py, lightning_cli.py, hf_train.py,
hf_datasets_train.py) resume bit for bit from a mid-epoch stop, driven the way ``seeder verify``
drives them: $SEEDER_STEPS records each optimizer step, $SEEDER_STOP_AFTER_STEP stops the run
through SeederCallback / SeederTrainer, $SEEDER_RESUME=1 resumes it (Lightning: through resume_path,
LightningCLI: its --ckpt_path). None of them has a flag or a line of its own for verify."""

import json
from pathlib import Path

import pytest
from helpers import REPO_ROOT

pytestmark = pytest.mark.slow

SMALL = [
    "--seed",
    "3",
    "--samples",
    "96",
    "--batch-size",
    "16",
    "--epochs",
    "2",
    "--workers",
    "1",
]  # 6 steps an epoch
STOP = 9  # mid-epoch 1, where verify's default stop goes


def records(path: Path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return (
        [r for r in rows if "step" in r and "loss" in r],
        [r["digest"] for r in rows if "digest" in r],
        {
            r["seeder_verify"]: r["at_step"]
            for r in rows
            if r.get("seeder_verify") in ("stopped", "resumed")
        },
    )


def stop_and_resume(
    server, tmp_path: Path, script: str, args, resume_args=(), *, steps=12, stop=STOP, env=None
):
    """The full run of ``steps`` optimizer steps, a run stopped at ``stop`` and its resume (in the
    stopped run's directory, as verify copies it) by ``server``: the resume is a fresh interpreter
    (its start is the subject), the other two fork from the server; ``env``: more variables for
    every run."""
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir()
    part.mkdir()
    env = {**(env or {}), "SEEDER_CKPT_DIR": str(part / "ckpt")}
    server.run(
        [script, *args],
        cwd=full,
        env={**env, "SEEDER_STEPS": str(full / "steps.jsonl")},
        timeout=240,
        start_is_subject=False,
    )
    server.run(
        [script, *args],
        cwd=part,
        timeout=240,
        start_is_subject=False,
        env={**env, "SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_STOP_AFTER_STEP": str(stop)},
    )
    stopped, _, marks = records(part / "steps.jsonl")
    assert [r["step"] for r in stopped] == list(range(1, stop + 1)) and marks == {"stopped": stop}
    server.run(
        [script, *args, *resume_args],
        cwd=part,
        timeout=240,
        env={**env, "SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_RESUME": "1"},
    )
    want, want_digest, _ = records(full / "steps.jsonl")
    got, got_digest, marks = records(part / "steps.jsonl")
    assert [r["step"] for r in want] == list(range(1, steps + 1))
    assert marks == {"stopped": stop, "resumed": stop}
    assert got == want  # every step's record (sum of squared parameters), as if never stopped
    assert len(want_digest) == 1 and got_digest[-1] == want_digest[0]  # model and optimizer at exit
    return part


def speaks_to_verify(script: str):
    """Lines naming a flag or file of verify's contract (a flag found in the script would be driven
    by verify)."""
    words = (
        "--stop-after",
        "--metrics",
        "SEEDER_METRICS",
        "DIGEST",
        "--ckpt-dir {",
        "metrics.jsonl",
    )
    return [
        line
        for line in (REPO_ROOT / script).read_text().splitlines()
        if any(w in line for w in words)
    ]


def test_plain_loop_example_has_no_flag_of_verify():
    """examples/train.py stops and resumes for verify through seeder.Checkpoint
    (tests/test_resume_example.py runs it)."""
    assert speaks_to_verify("examples/train.py") == []
    assert "seeder.Checkpoint(" in (REPO_ROOT / "examples" / "train.py").read_text()


def test_lightning_example_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, framework_scripts):
    pytest.importorskip("lightning")
    script = "examples/lightning_train.py"
    assert speaks_to_verify(script) == []
    part = stop_and_resume(framework_scripts, tmp_path, script, SMALL + ["--ckpt-dir", "ckpt"])
    assert (
        part / "ckpt" / "seeder-stop.ckpt"
    ).is_file()  # SeederCallback's stop, found again by resume_path


def test_hf_example_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, framework_scripts):
    pytest.importorskip("transformers")
    script = "examples/hf_train.py"
    assert speaks_to_verify(script) == []
    part = stop_and_resume(
        framework_scripts, tmp_path, script, SMALL, resume_args=["--resume"]
    )  # verify passes the script's --resume
    assert (part / "hf_train_out" / f"checkpoint-{STOP}" / "seeder_state_0.pt").is_file()


def test_lightning_cli_example_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, framework_scripts):
    """LightningCLI: the stop is SeederCallback's; the resume is the CLI's own --ckpt_path, which
    verify maps."""
    pytest.importorskip("lightning")
    script = "examples/lightning_cli.py"
    assert speaks_to_verify(script) == []
    args = [
        "fit",
        "--trainer.max_epochs",
        "2",
        "--data.samples",
        "96",
        "--data.batch_size",
        "16",
        "--data.workers",
        "1",
    ]
    stop_and_resume(
        framework_scripts,
        tmp_path,
        script,
        args,
        ["--ckpt_path", "ckpt/seeder-stop.ckpt"],
        env={"SEEDER_SEED": "3"},
    )


def test_hf_datasets_example_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, framework_scripts):
    """A Trainer script that splits its data with ``datasets`` after seeder.init: the split is the
    same in every run, and the Trainer's own checkpoint in output_dir carries the stop and the
    resume."""
    pytest.importorskip("transformers")
    pytest.importorskip("datasets")
    script = "examples/hf_datasets_train.py"
    assert speaks_to_verify(script) == []
    stop_and_resume(
        framework_scripts, tmp_path, script, [], steps=36, stop=18, env={"SEEDER_SEED": "3"}
    )
