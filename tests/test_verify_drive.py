"""How seeder verify drives a script: flags from its own parser, runs isolated in mirrors of the
user's folder, verdicts that say what was not tested (INCOMPLETE), output it cannot read, and final
digests."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from helpers import REPO_ROOT, cli
from optional import need_verify

need_verify(figures=False)  # every run here passes figures=False / --no-figures
from seeder.verify import VerifyConfig, verify  # noqa: E402
from seeder.verify._contract import Contract  # noqa: E402
from seeder.verify._escapes import snapshot  # noqa: E402
from seeder.verify._flags import adapt_contract, probe_parser  # noqa: E402

pytestmark = pytest.mark.slow

SCRIPTS = REPO_ROOT / "tests" / "scripts"
VERIFY = [  # seeder's command line, run in this process by cli(): its start is not the subject
    "verify",
    "--epochs",
    "2",
    "--repeats",
    "2",
    "--resume-repeats",
    "1",
    "--jobs",
    "2",
    "--no-figures",
    "--no-progress",
]


def checks(report):
    return {c["name"]: c["status"] for c in report["checks"]}


@pytest.fixture
def handed_off(handoff_kept, monkeypatch):
    """Each Python that verify starts hands its script to the session's handoff server (torch
    imported once), in CI too: these tests' subject is how verify drives a script (its folders, its
    parser), not the interpreters' start."""
    for name, value in handoff_kept.env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """The folder verify is started in: a file a script reads, nothing else."""
    home = tmp_path / "user"
    home.mkdir()
    (home / "settings.txt").write_text("0.05")
    monkeypatch.chdir(home)
    return home


# --- the probe: the script runs up to its parser, and nothing trains
# -------------------------------------------


def test_the_probe_reads_the_parser_with_arity_and_the_script_trains_nothing(tmp_path):
    script = tmp_path / "imagenet_like.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('data', metavar='DIR')\n"
        "p.add_argument('--resume', default='', metavar='PATH')\np.add_argument('--seed', "
        "type=int)\ng = p.add_mutually_exclusive_group()\ng.add_argument('--evaluate', "
        "action='store_true')\nargs = p.parse_args()\nopen('trained.txt', 'w').write('trained')\n"
    )
    probe = probe_parser(
        [sys.executable, str(script), "imagenet"], tmp_path, tmp_path / "probe", dict(os.environ)
    )
    assert probe.how.startswith("the options of its parser, read by running")
    options = {tuple(a["options"]): a for a in probe.actions}
    assert options[("--resume",)]["nargs"] is None and options[("--resume",)]["metavar"] == "PATH"
    assert options[("--evaluate",)]["nargs"] == 0 and options[()]["metavar"] == "DIR"
    assert not list(tmp_path.rglob("trained.txt"))  # it stopped at parse_args
    contract, notes = adapt_contract(Contract(), probe)
    assert (
        contract.resume == "" and contract.seed == "--seed {seed}"
    )  # ImageNet's --resume PATH gets no bare --resume


def test_the_probe_sees_a_subcommand_and_stops_a_parserless_script_at_its_first_step(
    tmp_path, handoff_kept
):
    cli = tmp_path / "cli.py"
    cli.write_text(
        "import argparse\np = argparse.ArgumentParser()\nsub = p.add_subparsers()\n"
        "fit = sub.add_parser('fit')\nfit.add_argument('--ckpt_path')\n"
        "p.parse_args()\nopen('ran', 'w')\n"
    )
    probe = probe_parser(
        [sys.executable, str(cli), "fit"], tmp_path, tmp_path / "p1", dict(os.environ)
    )
    assert [a["subcommand"] for a in probe.actions if a["options"] == ["--ckpt_path"]] == ["fit"]
    env = {**os.environ, **handoff_kept.env()}  # the probe's parser reading is the subject
    # seeder.init first, then the parser (LightningCLI's order): the parser is still read
    late = tmp_path / "late_parser.py"
    late.write_text(
        "import argparse, seeder\nseeder.init()\np = argparse.ArgumentParser()\n"
        "p.add_argument('--ckpt_path')\np.parse_args()\nopen('ran', 'w')\n"
    )
    probe = probe_parser([sys.executable, str(late)], tmp_path, tmp_path / "p2", env)
    assert ["--ckpt_path"] in [a["options"] for a in probe.actions or []], probe.how
    notebook = tmp_path / "notebook.py"  # no parser: trains as soon as it starts
    notebook.write_text(
        "import torch, seeder\nseeder.init()\nw = torch.nn.Parameter(torch.ones(1))\n"
        "opt = torch.optim.SGD([w], "
        "lr=1)\nw.sum().backward()\nopt.step()\nopen('trained.pt', 'w')\n"
    )
    probe = probe_parser([sys.executable, str(notebook)], tmp_path, tmp_path / "p3", env)
    assert probe.actions is None and probe.how.endswith(
        "reached its first optimizer step before any argument parser"
    )
    hangs = tmp_path / "hangs.py"
    hangs.write_text("import time\ntime.sleep(600)\n")
    probe = probe_parser(
        [sys.executable, str(hangs)], tmp_path, tmp_path / "p4", dict(os.environ), timeout=1
    )
    assert probe.actions is None and "within 1 s" in probe.how
    assert not list(tmp_path.rglob("trained.pt")) and not list(tmp_path.rglob("ran"))
    (tmp_path / "run.sh").write_text("python train.py\n")  # shown: a file of the user's
    assert probe_parser(["bash", "run.sh"], tmp_path, tmp_path / "p5", {}).how.startswith(
        "bash run.sh is not a Python"
    )


# --- a script without a parser: the transformers Trainer tutorial
# ----------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None
    or importlib.util.find_spec("datasets") is None,
    reason="transformers and datasets are not installed",
)
def test_the_trainer_tutorial_without_a_parser_passes_driven_by_seeders_variables(
    user_dir, monkeypatch
):
    from handoff import handoff_server

    for name, value in (
        handoff_server(frameworks=True, start_is_subject=False).env().items()
    ):  # as handed_off
        monkeypatch.setenv(name, value)
    before = snapshot(user_dir)
    script = str(SCRIPTS / "trainer_tutorial.py")
    rep = verify(
        VerifyConfig(
            command=[sys.executable, script],
            out=user_dir / "seeder-verify",
            epochs=2,
            repeats=2,
            resume_repeats=1,
            jobs=2,
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "PASS", rep["reasons"]
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "PASS",
        "resume-mid-epoch": "PASS",
        "variance": "PASS",
    }
    runs = {r["name"]: r for r in rep["runs"]}
    assert all(
        r["argv"] == [sys.executable, script] for r in rep["runs"]
    )  # never a flag it does not take
    assert runs["mid-0"]["driven_by"] == "environment SEEDER_SEED=42 SEEDER_STOP_AFTER_STEP=13"
    reproducible = next(c for c in rep["checks"] if c["name"] == "reproducible")
    assert (
        "the script ran its own 3 epochs: it takes no --epochs, so --epochs 2 was not passed"
        in reproducible["summary"]
    )
    assert runs["full-0"]["digest"] == runs["resume-0"]["digest"] == runs["resume-mid-0"]["digest"]
    # the Trainer's objects, compared after each optimizer step
    assert {"model", "optimizer", "lr_scheduler"} <= set(rep["compared"]["objects"])
    assert (
        snapshot(user_dir, [user_dir / "seeder-verify"]) == before
    )  # no test_trainer/ in the user's folder
    assert sorted(p.name for p in user_dir.iterdir()) == ["seeder-verify", "settings.txt"]
    assert (user_dir / "seeder-verify" / "runs" / "full-0" / "test_trainer").is_dir()


# --- isolation: runs read the user's files and write in their own folders
# -------------------------------------


def test_runs_read_the_users_files_and_write_only_in_their_own_folders(user_dir, handed_off):
    before = snapshot(user_dir)
    rep = verify(
        VerifyConfig(
            command=[sys.executable, str(SCRIPTS / "verify_paths.py"), "--log-losses"],
            out=user_dir / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,
            jobs=2,
            ignore_output=("train.log",),
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "PASS", rep["reasons"]
    assert snapshot(user_dir, [user_dir / "v"]) == before and sorted(os.listdir(user_dir)) == [
        "settings.txt",
        "v",
    ]
    log = user_dir / "v" / "runs" / "full-0" / "train.log"
    assert log.read_text() == "start at epoch 0\n" and not log.is_symlink()
    # A log of where each run started differs after a resume by design: named, left out.
    assert rep["compared"]["left_out"]["train.log"] == "--ignore-output"
    # settings.txt was read through the run's copy; after the runs no copy or link of it is left.
    assert not os.path.lexists(user_dir / "v" / "runs" / "full-0" / "settings.txt")
    # the losses are the script's; the final digests seeder's, compared too
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["full-0"]["digest"] and runs["full-0"]["digest"] == runs["resume-mid-0"]["digest"]
    assert runs["unseeded-0"]["digest"] != runs["full-0"]["digest"]


def test_a_folder_the_runs_share_is_named_with_the_option_that_points_there(user_dir, handed_off):
    """LambdaLabs' guide: --save-dir ../outputs from every run's folder, and a script that resumes
    whenever its checkpoint exists: runs resume each other's checkpoints."""
    rep = verify(
        VerifyConfig(
            command=[sys.executable, str(SCRIPTS / "verify_paths.py"), "--guide", "--resume-any"],
            out=user_dir / "v",
            epochs=2,
            repeats=2,
            resume_repeats=1,
            jobs=1,
            progress=False,
            figures=False,
        )
    )
    assert rep["verdict"] == "FAIL"
    shared = user_dir / "v" / "runs" / "outputs"
    assert rep["reasons"][0] == (
        f"the runs wrote to {shared}, outside their own folders: the script's --save-dir (default "
        f"'../outputs') points there from every run's folder, so the runs share it and one can "
        f"read or resume from another's output; pass a path inside the run instead (add "
        f"`--save-dir outputs` to the command)"
    )
    assert sorted(os.listdir(user_dir)) == ["settings.txt", "v"]


# --- verdicts: INCOMPLETE, and output verify cannot read
# -------------------------------------------------------


def test_the_readme_snippet_is_incomplete_not_a_pass(tmp_path, handed_off, capsys, started_in_tmp):
    """torch.save of seeder.state_dict() and no seeder.Checkpoint: nothing stops or resumes it."""
    rc, out, err = cli(
        capsys,
        VERIFY
        + ["--out", str(tmp_path / "v"), "--", sys.executable, str(SCRIPTS / "readme_snippet.py")],
    )
    assert rc == 4, out + err[-3000:]
    assert "verdict: INCOMPLETE" in out
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    assert checks(rep) == {
        "reproducible": "PASS",
        "resume": "SKIP",
        "resume-mid-epoch": "SKIP",
        "variance": "PASS",
    }
    assert rep["reasons"][0].startswith(
        "resume was not tested: no resume option; map one with --arg resume="
    )
    assert rep["reasons"][0].endswith("(or pass --allow-skip to accept a verdict without it)")
    assert {
        r["argv"][2:4] == ["--seed", "42"] for r in rep["runs"] if r["name"].startswith("full")
    } == {True}
    rc, out, err = cli(
        capsys,
        VERIFY
        + [
            "--out",
            str(tmp_path / "v"),
            "--allow-skip",
            "--",
            sys.executable,
            str(SCRIPTS / "readme_snippet.py"),
        ],
    )
    assert rc == 0 and "verdict: PASS" in out, out + err[-3000:]
    assert "not tested, as allowed: resume, resume-mid-epoch" in out


@pytest.mark.parametrize(
    "body",
    [
        "import json\nfor i in range(20):\n    print(json.dumps({'step': i, 'loss': "
        "float('nan')}))\n",
        "import random\nfor i in range(20):\n    print(''.join(random.choice('{}[]:ab ') for _ in "
        "range(30)))\n",
    ],
)
def test_a_script_printing_garbage_fails_saying_it_logged_nothing_readable(
    tmp_path, body, capsys, monkeypatch
):
    script = tmp_path / "garbage.py"
    script.write_text(body)
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(
        capsys, VERIFY + ["--out", str(tmp_path / "v"), "--", sys.executable, str(script)]
    )
    assert rc == 1, out + err[-3000:]
    assert "verdict: FAIL" in out and "variance ratio nan" not in out
    rep = json.loads((tmp_path / "v" / "report.json").read_text())
    reason = rep["reasons"][0]
    assert reason.startswith("the output of run full-0 had no per-step values seeder could read: ")
    assert "seeder.init()" in reason and "ckpt.step() of a seeder.checkpoint" in reason.lower()
    assert set(checks(rep).values()) == {"SKIP"}
    # Said after the first run: the others are left out, saying why.
    others = [r for r in rep["runs"] if r["name"] != "full-0"]
    assert others and {r["status"] for r in others} == {"omitted"}
    assert others[0]["reason"].startswith("run full-0 recorded no per-step value seeder could read")
