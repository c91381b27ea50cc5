"""seeder locate: two identically seeded runs of a real script, each with one injected cause of
irreproducibility (tests/scripts/locate_causes.py); the report names the operator or input, the
module, the file and the line, and the fix. Without the localisation runs' recorder there is
nothing to compare and every case fails."""

import json
import os
import re
import shutil
import sys

import pytest
import torch
from helpers import REPO_ROOT, run_python, seeder_main

from seeder.verify._locate import locate_after_verify

SCRIPT = REPO_ROOT / "tests" / "scripts" / "locate_causes.py"
NO_CUDA = "needs a CUDA device (torch.cuda.is_available() is False)"


def line_of(text):
    """``locate_causes.py:N``, N the line of the script that contains ``text``."""
    lines = SCRIPT.read_text().splitlines()
    found = [i + 1 for i, line in enumerate(lines) if text in line]
    assert len(found) == 1, (text, found)
    return f"tests/scripts/locate_causes.py:{found[0]}"


@pytest.fixture
def command(monkeypatch, capfd):
    """``python -m seeder ARGV`` in this process (:func:`helpers.seeder_main`): the subject here is
    what locate and verify name, write and print, not the start of their own process."""

    def run(argv, env=None, cwd=None):
        return seeder_main(argv, monkeypatch, capfd, env=env, cwd=cwd)

    return run


@pytest.fixture
def locate(command):
    """``seeder locate`` on the script with ``cause``: (exit status, report, printed lines)."""
    return lambda tmp_path, cause, *options, env=None: _locate(
        command, tmp_path, cause, *options, env=env
    )


def _locate(command, tmp_path, cause, *options, env=None):
    out = tmp_path / "loc"
    proc = command(
        [
            "locate",
            "--out",
            str(out),
            *options,
            "--",
            sys.executable,
            str(SCRIPT),
            "--cause",
            cause,
        ],
        env={"SEEDER_QUIET": "1", **(env or {})},
    )
    assert proc.returncode in (0, 1), (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    report = json.loads((out / "report.json").read_text())
    assert proc.stdout.splitlines()[: len(report["lines"])] == report["lines"]
    assert (out / "report.md").read_text().count("\n- ") == len(report["lines"])
    return proc.returncode, report, "\n".join(report["lines"])


@pytest.fixture
def handed_off(handoff_kept):
    """The runs hand their script to the session's handoff server (torch imported once), in CI too:
    the subject is the place locate names, not the interpreters' start. The runs share the server's
    hash seed, so the set-order case below runs fresh interpreters."""
    return handoff_kept.env()


@pytest.mark.slow
def test_a_generator_seeded_from_the_clock_is_named_with_its_module_and_line(
    tmp_path, handed_off, locate
):
    rc, rep, text = locate(tmp_path, "clock-generator", env=handed_off)
    assert rc == 1 and rep["kind"] == "generator", text
    assert (
        f"aten::randn in model.noise (forward) at {line_of('generator=self.gen')}"
        in rep["lines"][0]
    )
    assert "model.noise.gen, a generator seeded from something other than seeder" in rep["lines"][1]
    assert "seeder.register_generator(gen)" in rep["lines"][2]
    assert rep["step"] == 1 and rep["step_from"] == "the parameters differ after step 1"


@pytest.mark.slow
def test_a_kernel_that_sums_in_an_os_order_is_named_as_nondeterministic(
    tmp_path, handed_off, locate
):
    # the step given: the runs that find it are the generator test's subject
    rc, rep, text = locate(tmp_path, "urandom-sum", "--step", "1", env=handed_off)
    assert rc == 1 and rep["kind"] == "kernel", text
    assert (
        f"locate_toy::shuffled_sum in model.pool (forward) at {line_of('x + torch.ops.locate_toy')}"
        in text
    )
    assert "identical inputs, different outputs: a nondeterministic kernel" in text
    assert "is not one of torch's operators" in rep["lines"][2]


@pytest.mark.slow
def test_a_nondeterministic_backward_is_named_with_the_module_whose_forward_made_it(
    tmp_path, handed_off, locate
):
    rc, rep, text = locate(tmp_path, "urandom-backward", "--step", "1", env=handed_off)
    assert rc == 1 and rep["kind"] == "kernel", text
    assert (
        f"locate_toy::scatter_rows in model.encoder.0 (backward, GatherBackward of the forward at "
        f"{line_of('return table[index]')})"
    ) in rep["lines"][0]


@pytest.mark.slow
def test_a_vocabulary_from_a_set_is_named_as_the_hash_seed(tmp_path, locate):
    # real interpreters, each with its own hash seed (a handed-over run shares the server's); the
    # step given, so that no runs look for it
    rc, rep, text = locate(tmp_path, "set-vocab", "--step", "1", env={"PYTHONHASHSEED": "random"})
    assert rc == 1 and rep["kind"] == "input" and rep["hash_seed"] is True, text
    assert f"input 0 of aten::lift_fresh (forward) at {line_of('ids = torch.tensor(')}" in text
    assert "with PYTHONHASHSEED fixed both runs agree here" in rep["lines"][1]
    assert "sorted(the_set)" in rep["lines"][2]
    # the fix: the runs agree
    rc, rep, text = locate(tmp_path, "set-vocab", env={"PYTHONHASHSEED": "7"})
    assert rc == 0 and rep["kind"] == "identical", text


@pytest.mark.slow
def test_a_dataset_drawing_from_an_unseeded_numpy_generator_is_named(tmp_path, handed_off, locate):
    rc, rep, text = locate(
        tmp_path, "numpy-dataset", "--no-hash-check", "--step", "1", env=handed_off
    )
    assert rc == 1 and rep["kind"] == "batch" and rep["hash_seed"] is None, text
    assert f"the batch fed to model at {line_of('loss = model(x)')} differs" in rep["lines"][0]
    assert (
        f"in dataset NoisyData ({line_of('def __getitem__(self, i)')}, __getitem__)"
        in rep["lines"][0]
    )
    assert (
        "other sample content" in rep["lines"][1]
        and "np.random.default_rng(seeder.data.sample_seed" in text
    )


@pytest.mark.slow
def test_a_batch_from_worker_processes_is_compared_where_it_enters_the_model(
    tmp_path, handed_off, command
):
    # forked workers inherit the recorder: they must neither record nor write into its file
    rc, rep, text = _locate_workers(command, tmp_path, handed_off)
    assert rc == 1 and rep["kind"] == "batch", text
    # where the batch from a worker becomes a tensor
    assert rep["lines"][0].endswith(
        f"the batch fed to model at {line_of('loss = model(x)')} differs, first seen at aten::set_ "
        f"(forward) at {line_of('x = next(batches)')}"
    )
    assert "other sample content" in rep["lines"][1]


@pytest.mark.slow
def test_noise_from_a_clock_seeded_generator_beside_worker_batches_names_the_generator(
    tmp_path, handed_off, command
):
    # a GAN's loop: identical batches from 2 worker processes, whose arrival order varies from run
    # to run, and latent noise from a generator seeded from the clock
    rc, rep, text = _locate_workers(command, tmp_path, handed_off, "clock-noise")
    assert rc == 1 and rep["kind"] == "generator", text
    assert f"aten::randn (forward) at {line_of('generator=latent')}" in rep["lines"][0]
    assert "it draws from latent, a generator seeded from something other" in rep["lines"][1]
    assert "seeder.register_generator(latent)" in rep["lines"][2]


def _locate_workers(command, tmp_path, env, cause="numpy-dataset"):
    out = tmp_path / "workers"
    argv = [
        "locate",
        "--out",
        str(out),
        "--no-hash-check",
        "--step",
        "1",
        "--",
        sys.executable,
        str(SCRIPT),
        "--cause",
        cause,
        "--workers",
        "2",
    ]
    proc = command(argv, env={"SEEDER_QUIET": "1", **env})
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-5000:]
    for run in ("ops-a", "ops-b"):  # one writer: every line is a whole record
        for line in open(out / "runs" / run / "ops.rank0.jsonl"):
            json.loads(line)
    report = json.loads((out / "report.json").read_text())
    return proc.returncode, report, "\n".join(report["lines"])


@pytest.mark.slow
def test_a_batch_norm_fed_a_differently_ordered_batch_is_named_as_the_data_order(
    tmp_path, handed_off, locate
):
    rc, rep, text = locate(
        tmp_path, "batch-order", "--no-hash-check", "--step", "1", env=handed_off
    )
    assert rc == 1 and rep["kind"] == "batch", text
    assert f"the batch fed to model at {line_of('loss = model(x)')} differs" in rep["lines"][0]
    assert "the same samples in another order: the data order differs" in rep["lines"][1]
    assert "use seeder.DataLoader" in rep["lines"][2]


@pytest.mark.slow
def test_identical_runs_given_a_step_say_they_do_not_part_there(tmp_path, handed_off, locate):
    # with the step given, agreeing records say the runs do not part there (exit 0), and that a
    # later step is not compared (without a step: test_the_default_and_a_relative_out_...)
    rc, rep, text = locate(tmp_path, "none", "--step", "1", env=handed_off)
    assert rc == 0 and rep["kind"] == "identical" and not rep["differs"], text
    assert text.startswith("the runs do not part: the ") and "up to the end of step 1 agree" in text
    assert "run without --step to compare every step" in text and "does not see" not in text


@pytest.mark.slow
def test_a_failed_reproducible_check_names_the_cause_in_its_output_and_report(
    tmp_path, handed_off, command
):
    out = tmp_path / "v"
    proc = command(
        [
            "verify",
            "--epochs",
            "2",
            "--repeats",
            "2",
            "--resume-repeats",
            "1",
            "--no-mid-epoch",
            "--no-figures",
            "--no-progress",
            "--out",
            str(out),
            "--",
            sys.executable,
            str(SCRIPT),
            "--cause",
            "urandom-sum",
        ],
        env={"SEEDER_QUIET": "1", **handed_off},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "FAIL" and report["locate"]["kind"] == "kernel"
    # from the seeded runs' own records: no runs to find it
    assert report["locate"]["step_from"] == "given"
    first = (
        f"locate_toy::shuffled_sum in model.pool (forward) at {line_of('x + torch.ops.locate_toy')}"
    )
    assert "first difference (seeder locate):" in proc.stdout and first in proc.stdout
    assert "## The first difference (seeder locate)" in (out / "report.md").read_text()
    assert sorted(os.listdir(out / "locate" / "runs")) == ["ops-a", "ops-b"]


@pytest.mark.slow
def test_verify_no_locate_skips_the_localisation_and_names_the_command(
    tmp_path, handed_off, command
):
    out = tmp_path / "v"
    proc = command(
        [
            "verify",
            "--no-locate",
            "--epochs",
            "2",
            "--repeats",
            "2",
            "--resume-repeats",
            "1",
            "--no-mid-epoch",
            "--no-figures",
            "--no-progress",
            "--out",
            str(out),
            "--",
            sys.executable,
            str(SCRIPT),
            "--cause",
            "clock-generator",
        ],
        env={"SEEDER_QUIET": "1", **handed_off},
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "FAIL" and "locate" not in report
    assert not (out / "locate").exists()
    assert "seeder locate -- COMMAND (or seeder verify without --no-locate)" in proc.stdout


@pytest.mark.slow
def test_the_default_and_a_relative_out_work_from_any_folder_and_identical_runs_locate_nothing(
    tmp_path, handed_off, command
):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    shutil.copy(SCRIPT, project / "train.py")
    # from the script's folder, the default --out, the step looked for by two runs: none differs
    proc = command(
        ["locate", "--", sys.executable, "train.py", "--cause", "none"],
        env={"SEEDER_QUIET": "1", **handed_off},
        cwd=project,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    report = json.loads((project / "seeder-locate" / "report.json").read_text())
    assert report["kind"] == "identical" and "report: seeder-locate/report.md" in proc.stdout
    assert "nothing to locate" in report["lines"][0]
    # from another folder, a relative --out and a relative script; a given step skips the runs
    # that look for it, and the runs end after it
    proc = command(
        [
            "locate",
            "--out",
            "found/here",
            "--step",
            "2",
            "--no-hash-check",
            "--",
            sys.executable,
            "../project/train.py",
            "--cause",
            "clock-generator",
        ],
        env={"SEEDER_QUIET": "1", **handed_off},
        cwd=elsewhere,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-5000:]
    found = elsewhere / "found" / "here"
    report = json.loads((found / "report.json").read_text())
    assert report["kind"] == "generator" and "train.py:" in report["lines"][0]
    assert report["step_from"] == "given"
    assert sorted(os.listdir(found / "runs")) == ["ops-a", "ops-b"]
    ops = [json.loads(line) for line in open(found / "runs" / "ops-a" / "ops.rank0.jsonl")]
    assert [r["n"] for r in ops if r["k"] == "step"] == [1, 2]  # ended after the step asked for
    assert sorted(os.listdir(elsewhere)) == ["found"]  # nothing else written there


@pytest.mark.cuda
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_index_add_with_repeated_indices_is_named_with_its_fix(tmp_path, locate):
    rc, rep, text = locate(tmp_path, "index-add", "--step", "1")
    assert rc == 1 and rep["kind"] == "kernel", text
    assert (
        f"aten::index_add_ in model.pool (forward) at {line_of('.index_add_(0, index, x)')}"
        in rep["lines"][0]
    )
    assert "torch.use_deterministic_algorithms(True)" in rep["lines"][2]


def test_a_localisation_that_cannot_run_under_verify_is_one_line_and_the_verdict_stands(tmp_path):
    (tmp_path / "report.md").write_text("# seeder verify: FAIL\n")
    report = {
        "verdict": "FAIL",
        "checks": [{"name": "reproducible", "status": "FAIL", "summary": "differ"}],
        "runs": [{"name": "full-0", "argv": ["python", "train.py", "--token", "t0k3n-planted"]}],
    }
    lines = locate_after_verify(report, tmp_path)
    assert lines == [
        "seeder locate could not name the first difference: fewer than two seeded runs to "
        "compare; run it yourself: seeder locate -- COMMAND (docs/locate.md)"
    ]
    assert report["verdict"] == "FAIL" and report["locate"]["kind"] == "error"
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["locate"]["command"] == ["python", "<hidden>", "--token", "<hidden>"]
    assert (tmp_path / "report.md").read_text().endswith(f"- {lines[0]}\n")
    passed = {"checks": [{"name": "reproducible", "status": "PASS"}], "runs": []}
    assert locate_after_verify(passed, tmp_path) == [] and "locate" not in passed


def test_bad_usage_is_refused_before_any_run(tmp_path, capsys):
    # seeder's command line in this process: the refusals come before any run is started
    from seeder._cli import main

    def refused(*argv):
        assert main(["locate", *argv]) == 2
        return capsys.readouterr().err

    assert "no command given" in refused("--out", str(tmp_path / "o"))
    err = refused("--step", "0", "--out", str(tmp_path / "o"), "--", "python", "x.py")
    assert "--step must be an optimizer step >= 1" in err
    assert not (tmp_path / "o").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    err = refused("--out", str(tmp_path / "mine"), "--", "python", "x.py")
    assert "not empty and was not written by seeder locate" in err
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


@pytest.mark.slow
def test_a_failing_run_and_a_script_without_seeder_are_reported(tmp_path, command):
    proc = command(
        [
            "locate",
            "--out",
            str(tmp_path / "a"),
            "--",
            sys.executable,
            "-c",
            "print('about to fail'); raise SystemExit(4)",
        ],
    )
    # both runs fail; the first to end is reported and the other is stopped, so either name may come
    assert proc.returncode == 3 and re.search(r"run steps-[ab] failed", proc.stderr), proc.stderr
    assert "about to fail" in proc.stderr  # the end of its log
    proc = command(
        [
            "locate",
            "--out",
            str(tmp_path / "b"),
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
    )
    assert proc.returncode == 2 and "the command must call seeder.init" in proc.stderr


@pytest.mark.slow
def test_nothing_is_recorded_or_imported_outside_a_localisation_run(tmp_path):
    code = (
        "import sys, seeder; seeder.init(master_seed=1); import torch; torch.ones(2).sum(); "
        "print([m for m in sys.modules if m.startswith('seeder.verify')])"
    )
    assert run_python(["-c", code]).stdout.strip() == "[]"
    code = "import sys, seeder._cli; seeder._cli.build_parser(); print('torch' in sys.modules)"
    # the seeder command line (and locate's) needs no torch
    assert run_python(["-c", code]).stdout.strip() == "False"
    code = (
        "import os, seeder; seeder.init(master_seed=1); "
        "print(sorted(os.listdir(os.environ['SEEDER_LOCATE'])))"
    )
    assert (
        run_python(["-c", code], env={"SEEDER_LOCATE": str(tmp_path)}).stdout.strip()
        == "['ops.rank0.jsonl']"
    )
