"""A resume meets a fresh interpreter: another ``str`` hash seed, nothing imported. The run is still
bitwise exact.

The stopped run and its resume are each a new ``python`` process (``fresh_runs``, whatever the local
fork-server option says), as a user's are; the uninterrupted reference, whose start is not the
subject, forks from the session's server (``scripts``). A child forked from a server that imported
torch would inherit the server's hash seed and its imported seeder, torch and NumPy, and the first
assertions would fail there.
"""

from __future__ import annotations

import json

import pytest
from helpers import step_records

pytestmark = pytest.mark.slow

# records the interpreter's facts, then runs examples/train.py
FACTS = "tests/scripts/interpreter_facts.py"
ARGS = [
    "--samples",
    "128",
    "--batch-size",
    "32",
    "--seed",
    "20240601",
    "--epochs",
    "2",
    "--workers",
    "2",
]


def digest(stdout: str) -> str:
    """The digest of the example's last line (``trained N steps; digest HEX``)."""
    return [line for line in stdout.splitlines() if line.startswith("trained ")][-1].split()[-1]


def test_a_resume_in_an_interpreter_with_another_hash_seed_and_no_imports_is_bitwise(
    tmp_path, fresh_runs, scripts, monkeypatch
):
    monkeypatch.delenv(
        "PYTHONHASHSEED", raising=False
    )  # each interpreter salts str hashes its own way
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir()
    part.mkdir()
    facts = tmp_path / "facts.jsonl"
    env = {"SEEDER_TEST_FACTS": str(facts)}
    ckpt = ["--ckpt-dir", str(part / "ckpt")]
    reference = scripts.run(
        ["examples/train.py", *ARGS],
        cwd=full,
        env={"SEEDER_STEPS": str(full / "steps.jsonl")},
        timeout=300,
        start_is_subject=False,
    )
    fresh_runs.run(
        [FACTS, *ARGS, *ckpt],
        cwd=part,
        timeout=300,
        env={**env, "SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_STOP_AFTER_STEP": "3"},
    )
    resumed = fresh_runs.run(
        [FACTS, *ARGS, *ckpt, "--resume"],
        cwd=part,
        timeout=300,
        env={**env, "SEEDER_STEPS": str(part / "steps.jsonl"), "SEEDER_RESUME": "1"},
    )
    started = [json.loads(line) for line in facts.read_text().splitlines()]
    assert [s["imported"] for s in started] == [[], []]  # nothing inherited: seeder imports anew
    assert all(s["randomised"] for s in started)
    stopped_hash, resumed_hash = started[0]["hash"], started[1]["hash"]
    assert stopped_hash != resumed_hash  # another str hash seed (equal with chance 2**-64)
    want, got = step_records(full / "steps.jsonl"), step_records(part / "steps.jsonl")
    assert [r["step"] for r in want[0]] == list(range(1, 9))
    assert got[0] == want[0]  # every step's record, the stopped run's and the resumed run's
    assert got[1][-1:] == want[1]  # the digest at exit (the stopped run wrote its own before)
    assert digest(resumed.stdout) == digest(reference.stdout)
