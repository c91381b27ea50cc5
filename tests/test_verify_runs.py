"""seeder verify / compare with real processes: toy scripts, the CLI, Ctrl-C, the notebook, the
bundled example."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO_ROOT, child_env, cli, sigint_as_in_a_terminal
from optional import need_verify

need_verify(figures=False)  # the test that draws figures asks for matplotlib itself
from seeder.verify import CompareConfig, Contract, RunSpec, VerifyConfig, compare, run_all, verify  # noqa: E402  # noqa: E402

# verify mirrors the folder it starts in into every run: an empty one (conftest.started_in_tmp)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("started_in_tmp")]

TOY = str(REPO_ROOT / "tests" / "scripts" / "verify_toy.py")


def toy(*args):
    return [sys.executable, TOY, *args]


def checks(report):
    return {c["name"]: c["status"] for c in report["checks"]}


@pytest.fixture
def handed_off(handoff_kept, monkeypatch):
    """The environment under which each run verify starts hands its torch script to the session's
    handoff server (torch imported once), in CI too: these tests' subject is the cause verify names
    in the runs' records, not the interpreters' start
    (test_seeder_verify_alone_runs_the_bundled_example runs verify's in fresh ones)."""
    for name, value in handoff_kept.env().items():
        monkeypatch.setenv(name, value)
    return handoff_kept.env()


CLI = ["-m", "seeder", "verify", "--epochs", "2", "--repeats", "2", "--jobs", "2"]


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    """One ``seeder verify`` session of the toy from the command line (in this process), with its
    figures where matplotlib is installed: ``(result, out)``, read by the tests of its verdict, its
    output and its runs."""
    import contextlib
    import importlib.util
    import io
    import types

    from seeder._cli import main

    out = tmp_path_factory.mktemp("passing") / "v"
    figures = [] if importlib.util.find_spec("matplotlib") else ["--no-figures"]
    stdout, stderr = io.StringIO(), io.StringIO()  # seeder verify in this process, as cli() runs it
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        with pytest.MonkeyPatch.context() as mp:  # started in an empty folder (started_in_tmp)
            mp.chdir(tmp_path_factory.mktemp("started-in"))
            rc = main([*CLI[2:], *figures, "--out", str(out), "--", *toy()])
    p = types.SimpleNamespace(returncode=rc, stdout=stdout.getvalue(), stderr=stderr.getvalue())
    return p, out


@pytest.mark.xdist_group("verify_runs_passing")  # one worker builds the shared session
def test_verify_toy_passes_with_figures_and_per_run_output(passing):
    need_verify(figures=True)
    p, out = passing
    assert p.returncode == 0, p.stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "PASS", rep["reasons"]
    for name in (
        "report.json",
        "report.md",
        "methodology.png",
        "loss_curves.png",
        "overlay.png",
        "spread.png",
    ):
        assert (out / name).stat().st_size > 0, name
    for run in rep["runs"]:
        d = out / "runs" / run["name"]
        assert (d / "log.txt").read_text().startswith("pid ")
        assert (
            f" cwd {os.path.realpath(d)}\n" in (d / "log.txt").read_text()
        )  # every run in its own directory
        record = json.loads((d / "run.json").read_text())
        assert record["status"] == "ok" and record["argv"][:2] == toy()
    assert (out / "runs" / "resume-0" / "ckpt" / "last.pt").is_file()
    # run 3 waited for run 2; with --jobs 2 other runs overlapped
    rec = {
        r["name"]: json.loads((out / "runs" / r["name"] / "run.json").read_text())
        for r in rep["runs"]
    }
    for r in range(2):
        assert rec[f"resume-{r}"]["started"] >= rec[f"half-{r}"]["ended"] - 0.05
    assert rec["full-0"]["started"] < rec["half-0"]["ended"]


def test_verify_mid_epoch_stop_and_dllogger_metrics(tmp_path):
    rep = verify(
        VerifyConfig(
            command=toy("--dll"),
            out=tmp_path / "v",
            epochs=2,  # the stop at step 13 is in epoch 1 of 2 as of 3
            repeats=2,
            resume_repeats=1,  # what is asserted is repeat 0's
            jobs=2,
            stop_after_steps=13,
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "PASS", rep["reasons"]
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    first = mid["details"]["repeats"][0]["first_resumed_step"]
    assert first == [1, 13]  # DLLogger step [epoch, global step]; resumed mid-epoch
    assert mid["summary"].startswith(
        "stopped mid-epoch at step (1, 12) (5 of 8 steps into epoch 1)"
    )
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["mid-0"]["stop_after_steps"] == 13 and runs["mid-0"]["argv"][-4:-2] == [
        "--stop-after-steps",
        "13",
    ]


def test_default_run_catches_a_bug_only_a_mid_epoch_resume_shows(tmp_path):
    """Checkpoints inside an epoch save a stale RNG state; at epoch ends they are exact (the default
    run before the mid-epoch stop, mid_epoch=False here, passed this script)."""
    rep = verify(
        VerifyConfig(
            command=toy("--bug", "mid-epoch-rng"),
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,  # the bugs show in repeat 0
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "FAIL"
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    assert rep["reasons"][0].startswith(
        "mid-epoch stop, repeat 0: the resumed run (3b) differs from the uninterrupted "
        "run (1) from step 13 on"
    )  # --epochs 2: stopped after 5 of 8 steps of epoch 1
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    assert "(5 of 8 steps into epoch 1)" in mid["summary"], mid["summary"]
    assert (
        "the checkpoint does not restore everything" in rep["reasons"][0]
    )  # a script without seeder: no trace
    old_default = verify(
        VerifyConfig(
            command=toy("--bug", "mid-epoch-rng"),
            out=tmp_path / "old",
            epochs=2,
            repeats=2,
            resume_repeats=1,  # the bugs show in repeat 0
            jobs=2,
            progress=False,
            figures=False,
            mid_epoch=False,
        )
    )
    assert old_default["verdict"] == "PASS" and checks(old_default)["resume-mid-epoch"] == "SKIP"


def test_a_command_without_a_step_stop_skips_the_mid_epoch_stop(tmp_path):
    rep = verify(
        VerifyConfig(
            command=toy(),
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            jobs=2,
            progress=False,
            figures=False,
            contract=Contract(stop_after_steps=""),
        )
    )
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    assert (
        rep["verdict"] == "INCOMPLETE"
        and mid["status"] == "SKIP"
        and "takes no step stop flag" in mid["summary"]
    )
    assert rep["reasons"] == [
        f"resume-mid-epoch was {mid['summary']} (or pass --allow-skip to accept a verdict "
        "without it)"
    ]
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["mid-1"]["status"] == runs["resume-mid-1"]["status"] == "omitted"
    assert not (tmp_path / "v" / "runs" / "mid-0" / "log.txt").exists()


@pytest.mark.parametrize(
    "bug, failing, phrase",
    [
        # resume-rng: test_cli_pass_fail_and_crash, from the report of its FAIL run
        (
            "resume-momentum",
            {"resume", "resume-mid-epoch"},
            "the checkpoint does not restore everything",
        ),
        # seeded runs are then random: the F test rejects by chance in alpha = 5% of sessions, so it
        # is not asserted
        ("ignore-seed", {"reproducible", "resume"}, "the same seed does not give the same run"),
        ("fixed-seed", {"variance"}, "unseeded runs (4) are identical"),
    ],
)
def test_verify_reports_broken_scripts(tmp_path, bug, failing, phrase):
    rep = verify(
        VerifyConfig(
            command=toy("--bug", bug),
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,  # the bugs show in repeat 0
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "FAIL"
    failed = {n for n, s in checks(rep).items() if s == "FAIL"}
    assert failed == failing if bug != "ignore-seed" else failed >= failing
    assert any(phrase in r for r in rep["reasons"]), rep["reasons"]


@pytest.mark.xdist_group("verify_runs_passing")
def test_cli_pass_fail_and_crash(tmp_path, passing, capsys):
    args = [*CLI[2:], "--no-figures"]  # seeder verify ..., in this process
    p, _ = passing
    assert p.returncode == 0, p.stderr
    assert "verdict: PASS" in p.stdout and re.search(r"reproducible +PASS", p.stdout)
    rc, out, err = cli(
        capsys,
        args
        + [
            "--resume-repeats",
            "1",
            "--out",
            str(tmp_path / "bad"),
            "--",
            *toy("--bug", "resume-rng"),
        ],
    )
    assert rc == 1 and "verdict: FAIL" in out and "resumed run (3) differs" in out, out + err
    # the resume-rng case of test_verify_reports_broken_scripts, from this session's report
    rep = json.loads((tmp_path / "bad" / "report.json").read_text())
    assert rep["verdict"] == "FAIL"
    assert {n for n, s in checks(rep).items() if s == "FAIL"} == {"resume", "resume-mid-epoch"}
    phrase = "resumed run (3) differs from the uninterrupted run (1) from step 8"
    assert any(phrase in r for r in rep["reasons"]), rep["reasons"]
    rc, out, err = cli(
        capsys,
        args + ["--out", str(tmp_path / "crash"), "--no-progress", "--", *toy("--bug", "crash")],
    )
    assert rc == 3, out + err
    assert "failed: exited with status 3" in err and "planted crash after the first epoch" in err
    report = json.loads((tmp_path / "crash" / "report.json").read_text())
    assert report["verdict"] == "ERROR" and any(
        "exited with status 3" in r for r in report["reasons"]
    )
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x").write_text("x")
    rc, _, err = cli(capsys, args + ["--out", str(foreign), "--", *toy()])
    assert rc == 2 and "not written by seeder verify" in err


def test_runner_dependency_skip_and_bad_input(tmp_path):
    specs = [
        RunSpec("a", [sys.executable, "-c", "raise SystemExit(4)"], tmp_path / "a"),
        RunSpec("b", [sys.executable, "-c", "pass"], tmp_path / "b", after="a"),
    ]
    res = run_all(specs, progress=False, keep_going=True)
    assert [(r.name, r.status, r.returncode) for r in res] == [
        ("a", "failed", 4),
        ("b", "skipped", None),
    ]
    assert "a did not succeed" in res[1].reason
    with pytest.raises(ValueError, match="jobs"):
        run_all(specs, jobs=0)
    with pytest.raises(ValueError, match="not an earlier run"):
        run_all(list(reversed(specs)))
    res = run_all([RunSpec("nope", ["/nonexistent/binary"], tmp_path / "n")], progress=False)
    assert res[0].status == "failed" and "could not start" in res[0].reason
    res = run_all(
        [RunSpec("slow", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s")],
        progress=False,
        timeout=0.5,
    )
    assert res[0].status == "failed" and "timed out" in res[0].reason and res[0].duration < 20


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_stops_every_child(tmp_path):
    out = tmp_path / "v"
    cmd = [
        sys.executable,
        "-m",
        "seeder",
        "verify",
        "--out",
        str(out),
        "--jobs",
        "2",
        "--no-progress",
        "--no-figures",
        "--",
        *toy("--wait-unless-in", "full-0"),  # run (1) of repeat 0 finishes; the others wait
    ]
    proc = subprocess.Popen(
        cmd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
        preexec_fn=sigint_as_in_a_terminal,
    )
    pids = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(pids) < 2 and proc.poll() is None:
            pids = [  # the runs going now, each waiting after its first step
                int(text.split()[1])
                for text in (p.read_text() for p in out.glob("runs/*/log.txt"))
                if text.startswith("pid ") and "\nwaiting\n" in text
            ]
            time.sleep(0.1)
        assert len(pids) == 2, "two runs should be going at once"
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        assert proc.returncode == 130, err
        assert "interrupted" in err
        assert not any(_alive(p) for p in pids)
    finally:
        for pid in pids:  # a run left going would wait for a signal forever
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    statuses = {  # run (1) of repeat 0 went first, alone, and finished
        json.loads(p.read_text())["status"]
        for p in out.glob("runs/*/run.json")
        if p.parent.name != "full-0"
    }
    assert statuses == {"interrupted"}


def test_compare_detects_a_planted_learning_rate_change(tmp_path):
    rep = compare(
        CompareConfig(
            command=toy(),
            out=tmp_path / "c",
            runs=4,
            epochs=4,
            b_args=["--lr", "0.08"],
            jobs=2,
            progress=False,
        )
    )
    assert rep["differs"], rep["summary"]
    assert not rep["intervals"]["0.95"]["contains_zero"]
    assert (tmp_path / "c" / "compare.png").stat().st_size > 0


def test_compare_does_not_flag_identical_configurations(capsys, tmp_path):
    rc, out, err = cli(
        capsys,
        [
            "compare",
            "--out",
            str(tmp_path / "c"),
            "--runs",
            "3",
            "--epochs",
            "2",
            "--jobs",
            "2",
            "--no-figures",
            "--fail-on-difference",
            "--a",
            "--lr 0.05",
            "--",
            *toy(),
        ],
    )
    assert rc == 0, err
    rep = json.loads((tmp_path / "c" / "report.json").read_text())
    assert not rep["differs"] and rep["paired_differences"] == [0.0, 0.0, 0.0]
    assert "no difference detected" in out


def test_verify_real_seeder_script_that_forgets_the_seeder_state(capsys, tmp_path, handed_off):
    """torch + the real seeder, stopped mid-epoch: resuming without seeder.load_state_dict is
    caught."""
    script = str(REPO_ROOT / "tests" / "scripts" / "verify_torch_toy.py")
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
            "--jobs",
            "2",
            "--resume-repeats",
            "1",
            "--stop-after-steps",
            "9",
            "--no-figures",
            "--no-progress",
            "--",
            sys.executable,
            script,
            "--bug",
            "no-seeder-state",
        ],
    )
    assert rc == 1, err
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    # at the epoch boundary reseed(1, epoch) alone restores every stream; only the mid-epoch stop
    # catches it
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    assert "differs from the uninterrupted run (1) from step 9 on" in rep["reasons"][0]


LOADER_TOY = [sys.executable, str(REPO_ROOT / "tests" / "scripts" / "verify_loader_toy.py")]


def test_verify_names_the_missing_dataloader_generator(capsys, tmp_path, handed_off):
    """torch + the real seeder + a plain DataLoader without generator=: the default run says what to
    pass."""
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
            "--jobs",
            "2",
            "--resume-repeats",
            "1",
            "--no-figures",
            "--no-progress",
            "--",
            *LOADER_TOY,
            "--bug",
            "no-generator",
        ],
    )
    assert rc == 1, err
    assert "pass generator=seeder.data.dataloader_generator() to the DataLoader" in out.replace(
        "Pass", "pass"
    )
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    diagnosis = mid["details"]["repeats"][0]["diagnosis"]
    # 6 steps per epoch: --epochs 2 stopped after 3 of epoch 1 (8 samples a batch), first differing
    # step 10
    assert (diagnosis["state"], diagnosis["epoch"], diagnosis["position"]) == ("torch", 1, 24)
    assert "differs from the uninterrupted run (1) from step 10 on" in rep["reasons"][0]
    assert (tmp_path / "v" / "runs" / "full-0" / "trace.rank0.jsonl").is_file()
    assert not (tmp_path / "v" / "runs" / "unseeded-0" / "trace.rank0.jsonl").exists()


def test_verify_names_a_sampler_position_that_never_moved(tmp_path, handed_off):
    rep = verify(
        VerifyConfig(
            command=LOADER_TOY + ["--bug", "no-advance"],
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "FAIL",
        "variance": "PASS",
    }
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    assert mid["details"]["repeats"][0]["diagnosis"]["state"] == "position"
    reason = rep["reasons"][0]
    assert (
        "logged steps the uninterrupted run (1) does not have" in reason
    )  # it trained epoch 0 over again
    assert (
        "the sampler position differs: the resumed run restarted epoch 1 at its first sample, "
        "although the stopped run had trained 3 step(s) of it"
    ) in reason and "call sampler.advance(len(batch))" in reason


@pytest.mark.skipif(
    not (REPO_ROOT / "examples" / "train.py").is_file(),
    reason="examples/train.py is not on this branch",
)
def test_seeder_verify_alone_runs_the_bundled_example(capsys, tmp_path):
    """The README's command, made small: no training command means examples/train.py (options
    after -- go to it). Every run verify starts is a fresh interpreter, as for a user (verify
    itself runs in the test process: its start is not the subject)."""
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
            "--jobs",
            "2",
            "--resume-repeats",
            "1",
            "--no-figures",
            "--no-progress",
            "--",
            "--samples",
            "256",
            "--workers",
            "1",
        ],
    )
    assert rc == 0, out + err[-3000:]
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    assert rep["verdict"] == "PASS" and checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "PASS",
        "variance": "PASS",
    }
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["full-0"]["argv"][1] == str(REPO_ROOT / "examples" / "train.py")
    assert (
        runs["full-0"]["digest"]
        == runs["resume-0"]["digest"]
        == runs["resume-mid-0"]["digest"]
        == runs["full-1"]["digest"]
    )
    assert (
        runs["mid-0"]["stop_after_steps"] == 13
    )  # 256 samples / 32 = 8 steps an epoch: 5 of 8 into epoch 1
    assert runs["unseeded-0"]["digest"] != runs["unseeded-1"]["digest"]


@pytest.mark.skipif(
    not (REPO_ROOT / "examples" / "train.py").is_file(),
    reason="examples/train.py is not on this branch",
)
def test_seeder_compare_alone_runs_the_bundled_example_without_its_flags(
    capsys, tmp_path, handed_off
):
    """`seeder compare --b ...` drives examples/train.py as verify does: no --metrics flag, seeder
    records the steps."""
    rc, out, err = cli(
        capsys,
        [
            "compare",
            "--out",
            str(tmp_path / "c"),
            "--runs",
            "2",
            "--epochs",
            "1",
            "--jobs",
            "2",
            "--no-figures",
            "--no-progress",
            "--b",
            "--lr 0.07",
            "--",
            "--samples",
            "128",
            "--workers",
            "0",
        ],
    )
    assert rc == 0, out + err[-3000:]
    rep = json.loads((tmp_path / "c" / "report.json").read_text())
    assert any(n.startswith("the script's parser has no --metrics") for n in rep["notes"]), rep[
        "notes"
    ]
    assert [r["argv"][-2:] for r in rep["runs"] if r["name"].startswith("b-")] == [
        ["--lr", "0.07"]
    ] * 2
    assert len(rep["paired_differences"]) == 2


PLAIN = str(REPO_ROOT / "tests" / "scripts" / "plain_loop.py")


def test_verify_without_a_contract_a_plain_loop_with_seeder_checkpoint(tmp_path, handed_off):
    """No flag of verify's: seeder records the steps, seeder.Checkpoint stops and resumes; mid-epoch
    stop in epoch 1."""
    rep = verify(
        VerifyConfig(
            command=[sys.executable, PLAIN],
            out=tmp_path / "v",
            epochs=2,
            repeats=2,
            jobs=2,
            resume_repeats=1,
            progress=False,
            figures=False,
        )
    )
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "PASS",
        "variance": "PASS",
    }
    runs = {r["name"]: r for r in rep["runs"]}
    assert (
        "resume-1" not in runs and "resume-mid-1" not in runs
    )  # --resume-repeats 1: 8 runs, not 12
    assert (
        runs["mid-0"]["stop_where"] == "3 of 6 steps into epoch 1"
        and runs["half-0"]["stop_after_steps"] == 6
    )
    assert (
        runs["unseeded-0"]["master_seed"] != runs["unseeded-1"]["master_seed"]
    )  # drawn, printed, recorded
    assert any(
        "reached its first optimizer step before any argument parser" in n for n in rep["notes"]
    ), rep["notes"]
    assert runs["full-0"]["argv"] == [
        sys.executable,
        PLAIN,
    ]  # no flag it may not take: only seeder's variables
    assert runs["resume-mid-0"]["driven_by"] == "environment SEEDER_SEED=42 SEEDER_RESUME=1"
    assert runs["mid-0"]["driven_by"] == "environment SEEDER_SEED=42 SEEDER_STOP_AFTER_STEP=9"
