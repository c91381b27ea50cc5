"""examples/mnist_port.py (pytorch/examples' MNIST script ported to seeder) resumes bit for bit from
a mid-epoch stop, driven the way ``seeder verify`` drives it: $SEEDER_STEPS records each optimizer
step, $SEEDER_STOP_AFTER_STEP stops the run through its seeder.Checkpoint, $SEEDER_RESUME=1 resumes
it."""

import json

import pytest

pytestmark = pytest.mark.slow

SCRIPT = "examples/mnist_port.py"
ARGS = [
    "--seed",
    "3",
    "--samples",
    "64",
    "--batch-size",
    "32",
    "--epochs",
    "2",
    "--log-interval",
    "100",
]  # 2 steps an epoch


def records(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if "step" in r and "loss" in r], [
        r["digest"] for r in rows if "digest" in r
    ]


def test_the_ported_mnist_script_stopped_mid_epoch_resumes_bit_for_bit(tmp_path, scripts):
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir()
    part.mkdir()
    scripts.run(
        [SCRIPT, *ARGS],
        cwd=full,
        env={"SEEDER_STEPS": str(full / "steps.jsonl")},
        start_is_subject=False,
    )
    scripts.run(
        [SCRIPT, *ARGS],
        cwd=part,
        env={"SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_STOP_AFTER_STEP": "3"},
        start_is_subject=False,
    )
    assert (part / "mnist_ckpt.pt").is_file()
    stopped, _ = records(part / "steps.jsonl")
    assert [r["step"] for r in stopped] == [1, 2, 3]  # step 3: the first of epoch 2
    scripts.run(
        [SCRIPT, *ARGS],
        cwd=part,
        env={"SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_RESUME": "1"},
    )
    want, want_digest = records(full / "steps.jsonl")
    got, got_digest = records(part / "steps.jsonl")
    assert [r["step"] for r in want] == list(range(1, 5))
    assert got == want  # every step's record (sum of squared parameters), as if never stopped
    assert (
        len(want_digest) == 1 and got_digest[-1] == want_digest[0]
    )  # model and optimizer at exit (the stop wrote one)
