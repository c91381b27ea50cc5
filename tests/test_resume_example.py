"""examples/train.py end to end: stop/resume is bitwise, and so is resuming after SIGKILLs (real
processes).

Every run here is a real ``python examples/train.py`` (or ``torchrun``) process, driven the way
``seeder verify`` drives it: ``$SEEDER_STEPS`` records each optimizer step (step, epoch, sum of
squared parameters) and a digest at exit, ``$SEEDER_STOP_AFTER_STEP`` stops it through
``seeder.Checkpoint`` with a checkpoint, ``--resume`` (and ``$SEEDER_RESUME=1``) continues it. The
kill tests run it through ``tests/scripts/train_faults.py``, which adds the fault hooks the example
does not carry. A run compares its per-step records and final digest with an uninterrupted reference
run of the same seed.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import pytest
import torch
from helpers import ForkServer, step_records, torchrun

from seeder._run.steps import ENV_RESUME, ENV_STEPS, ENV_STOP, read_marks, read_steps

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("resume_example")]

SCRIPT = "examples/train.py"
FAULTS = "tests/scripts/train_faults.py"  # the example with kill and pause hooks (--fault-* flags)
SEED = "20240601"
# Small: 128 samples, batch 32 -> 4 steps per epoch in one process, 2 per rank under torchrun.
BASE = ["--samples", "128", "--batch-size", "32"]
DALI = ["--epochs", "3", "--loader", "dali"]  # 12 steps


def dali_available() -> bool:
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        if os.environ.get("SEEDER_REQUIRE_DALI") == "1":
            raise
        return False
    return True


@pytest.fixture(scope="module")
def server(scripts):
    """Runs of the example: the session's :meth:`helpers.ForkServer.kept` (``scripts`` of
    tests/conftest.py, shared with the other modules' runs): each resume is a fresh interpreter (the
    subject here); the runs that do not resume (references, the runs before a stop) fork from one
    server that imported torch once."""
    return scripts


def train(
    server: ForkServer,
    out: Path,
    *args: str,
    seed: Optional[str] = SEED,
    env: Optional[dict[str, str]] = None,
) -> tuple[list[dict], Optional[str]]:
    """Run the example in ``out`` to its end (or a stop); return the step records in ``out`` and the
    printed digest. A run that resumes (``--resume``) is a fresh interpreter: its start is the
    subject."""
    out.mkdir(parents=True, exist_ok=True)
    seed_args = ["--seed", seed] if seed is not None else []
    proc = server.run(
        [SCRIPT, *BASE, *seed_args, *args],
        cwd=out,
        env={ENV_STEPS: str(out / "steps.jsonl"), **(env or {})},
        timeout=300,
        start_is_subject="--resume" in args,
    )
    return step_records(out / "steps.jsonl")[0], printed_digest(proc.stdout)


def stop_at(step: int) -> dict[str, str]:
    return {ENV_STOP: str(step)}


RESUME = {ENV_RESUME: "1"}  # with --resume, as seeder verify resumes a run


def printed_digest(stdout: str) -> Optional[str]:
    """The digest of the example's last line (``trained N steps; digest HEX``), or None (a stopped
    run prints none)."""
    lines = [line for line in stdout.splitlines() if line.startswith("trained ")]
    return lines[-1].split()[-1] if lines else None


@pytest.fixture(scope="module")
def reference(tmp_path_factory, server) -> tuple[list[dict], str]:
    """2 epochs uninterrupted, 2 workers, checkpoints every 3 steps (checkpointing must not change
    anything)."""
    out = tmp_path_factory.mktemp("reference")
    records, digest = train(
        server,
        out,
        "--epochs",
        "2",
        "--workers",
        "2",
        "--ckpt-dir",
        str(out / "ckpt"),
        "--ckpt-every-steps",
        "3",
    )
    assert [(r["step"], r["epoch"]) for r in records] == [(k, (k - 1) // 4) for k in range(1, 9)]
    assert (
        digest is not None and len(step_records(out / "steps.jsonl")[1]) == 1
    )  # seeder's digest at exit
    return records, digest


def test_stopped_three_times_with_other_workers_each_resume_is_bitwise(tmp_path, reference, server):
    """One run stopped inside epoch 0, at its end and inside epoch 1, each resume a fresh process
    with another DataLoader: 2 workers, then 2 (mid-epoch), persistent 2 (from an epoch's end), 0
    (mid-epoch, after persistent workers)."""
    ref_records, ref_digest = reference
    ckpt = ["--epochs", "2", "--ckpt-dir", str(tmp_path / "ckpt")]
    steps = tmp_path / "steps.jsonl"
    part, stop_digest = train(server, tmp_path, *ckpt, "--workers", "2", env=stop_at(3))
    assert [r["step"] for r in part] == [1, 2, 3] and stop_digest is None  # exited at the stop
    assert read_marks(steps) == {"stopped": 3}
    resumed_at = 3
    for workers, stop in (["2"], 4), (["2", "--persistent-workers"], 6):
        assert torch.load(tmp_path / "ckpt" / "last.pt", weights_only=True)["step"] == resumed_at
        part, stop_digest = train(
            server,
            tmp_path,
            *ckpt,
            "--resume",
            "--workers",
            *workers,
            env={**RESUME, **stop_at(stop)},
        )
        assert [r["step"] for r in part] == list(range(1, stop + 1)) and stop_digest is None
        assert read_marks(steps) == {"stopped": stop, "resumed": resumed_at}
        resumed_at = stop
    records, digest = train(server, tmp_path, *ckpt, "--resume", "--workers", "0", env=RESUME)
    assert read_marks(steps) == {"stopped": 6, "resumed": 6}
    assert digest == ref_digest
    assert records == ref_records  # every step's record, in one file, as if never stopped


@pytest.fixture(scope="module")
def dali_reference(tmp_path_factory, server) -> tuple[list[dict], str]:
    """3 epochs of the DALI loader uninterrupted, checkpoints at epoch ends."""
    out = tmp_path_factory.mktemp("dali_reference")
    records, digest = train(server, out, *DALI, "--workers", "2", "--ckpt-dir", str(out / "ckpt"))
    assert [r["step"] for r in records] == list(range(1, 13)) and digest is not None
    return records, digest


def test_seeded_runs_repeat_and_unseeded_runs_differ(tmp_path, reference, server):
    ref_records, ref_digest = reference
    again, digest = train(server, tmp_path / "again", "--epochs", "2", "--workers", "2")
    assert digest == ref_digest and again == ref_records
    a, da = train(server, tmp_path / "u1", "--epochs", "2", "--workers", "2", seed=None)
    b, db = train(server, tmp_path / "u2", "--epochs", "2", "--workers", "2", seed=None)
    assert len({da, db, ref_digest}) == 3
    assert [r["loss"] for r in a] != [r["loss"] for r in b]


# ------------------------------------------------------------------------------------- torchrun


def torchrun_train(
    out: Path,
    *args: str,
    script: str = SCRIPT,
    launcher: Sequence[str] = (),
    env: Optional[dict[str, str]] = None,
) -> tuple[list[dict], Optional[str]]:
    results = torchrun(
        [script, *BASE, "--seed", SEED, *args],
        nproc=2,
        timeout=180,
        extra_launcher_args=launcher,
        env={ENV_STEPS: str(out / "steps.jsonl"), **(env or {})},
    )
    return step_records(out / "steps.jsonl")[0], printed_digest(results[0].stdout)


@pytest.fixture(scope="module")
def torchrun_reference(tmp_path_factory, handoff_kept) -> tuple[list[dict], str]:
    """The uninterrupted run: its ranks' start is not the subject, so they hand their script to the
    session's handoff server (torch imported once), in CI too."""
    out = tmp_path_factory.mktemp("torchrun_reference")
    records, digest = torchrun_train(
        out,
        "--epochs",
        "3",
        "--workers",
        "2",
        "--ckpt-dir",
        str(out / "ckpt"),
        env=handoff_kept.env(),
    )
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6] and digest is not None
    return records, digest


def test_torchrun_two_ranks_stop_mid_epoch_resume_and_restart_after_one_rank_is_killed(
    tmp_path, torchrun_reference, handoff_kept
):
    """Stopped mid-epoch; the resume's ranks are fresh, and rank 1 SIGKILLs itself after step 5
    (first attempt only): the group restarts and resumes from step 4's checkpoint, which the killed
    attempt wrote."""
    ref_records, ref_digest = torchrun_reference
    ckpt = ["--epochs", "3", "--workers", "2", "--ckpt-dir", str(tmp_path / "ckpt")]
    # the run before the stop hands its ranks to the handoff server; the resume's ranks are fresh
    torchrun_train(tmp_path, *ckpt, env={**handoff_kept.env(), **stop_at(3)})
    state = torch.load(tmp_path / "ckpt" / "last.pt", weights_only=True)
    assert state["step"] == 3 and [r["rank"] for r in state["seeder"]["ranks"]] == [
        0,
        1,
    ]  # one file, every rank
    assert read_marks(tmp_path / "steps.jsonl") == {"stopped": 3}
    records, digest = torchrun_train(
        tmp_path,
        "--fault-kill-at",
        "5",
        "--fault-kill-rank",
        "1",
        *ckpt,
        "--ckpt-every-steps",
        "1",
        "--resume",
        script=FAULTS,
        launcher=["--max-restarts", "1"],
        env=RESUME,
    )
    resumed = [
        r["at_step"]
        for r in read_steps(tmp_path / "steps.jsonl")
        if r.get("seeder_verify") == "resumed"
    ]
    assert resumed == [3, 4]  # the stop's checkpoint, then the killed attempt's last one
    assert digest == ref_digest and records == ref_records  # step 5's redone record equal too


# ----------------------------------------------------------------------------------------- faults


class Run:
    """One ``train.py --resume`` run (with fault hooks) in its own session, so that SIGKILL takes
    its workers too."""

    def __init__(
        self,
        server: ForkServer,
        out: Path,
        args: Sequence[str],
        hooks: Sequence[str] = (),
        note: str = "",
    ):
        self.steps, self.note = out / "steps.jsonl", note
        self.forked = server.start(
            [FAULTS, *hooks, *BASE, "--seed", SEED, "--resume", *args],
            cwd=out,
            env={ENV_STEPS: str(self.steps)},
        )

    def kill(self) -> None:
        rc = self.forked.kill()
        assert rc == -signal.SIGKILL, f"exited by itself with {rc} before the kill; {self.note}"

    def wait_for_line(self, prefix: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.forked.stdout().splitlines()):
                return
            if self.forked.poll() is not None:
                raise AssertionError(
                    f"process ended (rc {self.forked.returncode}) without printing {prefix!r}"
                )
            time.sleep(0.02)  # polls the run's output file
        raise AssertionError(f"no {prefix!r} line in {timeout}s")

    def wait_for_step(self, step: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.forked.poll() is not None:
                raise AssertionError(
                    f"process ended (rc {self.forked.returncode}) before step {step}"
                )
            done = [r["step"] for r in step_records(self.steps)[0]]
            if done and max(done) >= step:
                return
            time.sleep(0.02)  # polls the steps file
        raise AssertionError(f"step {step} not reached in {timeout}s")


@pytest.mark.skipif(
    not dali_available(), reason="DALI is not installed (pip install 'seeder[dali]')"
)
def test_dali_loader_stopped_then_sigkilled_in_each_window_resumes_exactly(
    tmp_path, server, dali_reference
):
    """Stopped after epoch 0's last batch, resumed there and stopped inside epoch 1, resumed again
    and SIGKILLed once in each window (after a random step, inside a random checkpoint's write, at
    a random moment), in a random order; every resume continues from the last good file. (The
    torch loader: a SIGKILL in each window in test_fault_kills.py.)"""
    total = 12  # 3 epochs x 4 steps; checkpoints at every 2nd step and at epoch ends (4, 8, 12)
    args = [
        *DALI,
        "--workers",
        "2",
        "--ckpt-dir",
        str(tmp_path / "ckpt"),
        "--ckpt-every-steps",
        "2",
    ]
    ref_records, ref_digest = dali_reference
    train(server, tmp_path, *args, env=stop_at(4))  # after epoch 0's last batch
    part, _ = train(server, tmp_path, *args, "--resume", env={**RESUME, **stop_at(6)})
    assert [r["step"] for r in part] == list(range(1, 7))  # resumed there, stopped mid-epoch 1
    assert read_marks(tmp_path / "steps.jsonl") == {"stopped": 6, "resumed": 4}

    seed = int(os.environ.get("SEEDER_FAULT_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    write = rng.choice([8, 10])
    kill = rng.choice([s for s in range(7, total) if s != write])
    events = sorted([("write", write), ("step", kill)], key=lambda e: e[1])
    events.insert(rng.randrange(len(events) + 1), ("time", rng.uniform(0.5, 4.0)))
    note = f"kill plan {events} (SEEDER_FAULT_SEED={seed} repeats it)"
    ckpt = tmp_path / "ckpt" / "last.pt"
    for kind, at in events:
        hooks = ["--fault-step-sleep", "0.1"]
        if kind == "write":
            hooks += ["--fault-ckpt-pause", "60", "--fault-ckpt-pause-at", str(at)]
        before = torch.load(ckpt, weights_only=True)["step"] if ckpt.exists() else None
        if before == total:
            # a late kill landed after the last checkpoint: the run has nothing left to interrupt
            break
        if kind == "write" and before is not None and before >= at:
            continue  # an earlier kill landed after this checkpoint: nothing to interrupt
        run = Run(server, tmp_path, args, hooks, note)
        if kind == "write":
            run.wait_for_line(f"CKPT_PAUSE {at}")
            run.kill()
            partial = list((tmp_path / "ckpt").glob(".last.pt.*.tmp"))
            assert partial, note  # the half-written file is there ...
            after = torch.load(ckpt, weights_only=True)["step"] if ckpt.exists() else None
            assert after is None or after < at, (
                note
            )  # ... and last.pt is still the previous good checkpoint
        elif kind == "step":
            run.wait_for_step(at)
            run.kill()
        else:
            time.sleep(at)
            rc = (
                run.forked.kill()
            )  # a random moment: the run may have finished on its own just before
            assert rc in (0, -signal.SIGKILL), f"exit status {rc}; {note}"
    final = Run(server, tmp_path, args)
    assert final.forked.wait(300) == 0, f"{note}\n{final.forked.err.read_text()[-3000:]}"
    assert printed_digest(final.forked.stdout()) == ref_digest, note
    assert step_records(tmp_path / "steps.jsonl")[0] == ref_records, (
        note
    )  # redone steps recorded equal too
    assert not list(
        (tmp_path / "ckpt").glob(".last.pt.*.tmp")
    )  # the next save removes a killed write's half
    other, other_digest = train(server, tmp_path / "other", *DALI, "--workers", "2", seed="7")
    assert other_digest != ref_digest
