"""Verify without a contract, in process: flag detection, seeder's stops and resumes,
seeder.Checkpoint."""

import gc
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

import seeder
import seeder.verify._flags
from seeder._run import steps as stepwatch
from seeder.verify._contract import TEMPLATE_NAMES, Contract, Metrics
from seeder.verify._flags import (
    LIGHTNING_RESUME,
    ParserProbe,
    adapt_contract,
    probe_argv,
    probe_parser,
)
from seeder.verify._seederstops import NO_RESUME, NO_STOP, stop_steps, untested

#: LightningCLI's parser as the probe reports it: options of the root and of the `fit` subcommand.
LIGHTNING_ACTIONS = [
    {"options": ["-h", "--help"], "nargs": 0},
    {"options": [], "dest": "subcommand", "nargs": "A..."},
    {"options": ["--seed_everything"], "nargs": None, "subcommand": "fit"},
    {"options": ["--trainer.max_epochs"], "nargs": None, "subcommand": "fit"},
    {"options": ["--ckpt_path"], "nargs": None, "metavar": "P", "subcommand": "fit"},
]


def test_flags_the_parser_does_not_take_are_left_to_seeder():
    c, notes = adapt_contract(Contract(), ParserProbe(LIGHTNING_ACTIONS, "from its parser"))
    assert (c.seed, c.epochs, c.stop_after_steps, c.metrics, c.resume) == (
        "",
        "",
        "",
        "",
        LIGHTNING_RESUME,
    )
    assert "the script's parser has no --seed: the seed goes through $SEEDER_SEED" in notes
    given, notes = adapt_contract(
        Contract(epochs="--trainer.max_epochs {epochs}"),
        ParserProbe(LIGHTNING_ACTIONS, "from its parser"),
    )
    assert given.epochs == "--trainer.max_epochs {epochs}"  # set with --arg: kept
    assert "--trainer.max_epochs: passed as set with --arg (--trainer.max_epochs {epochs})" in notes


def test_flags_are_passed_only_with_the_arity_the_parser_gives_them():
    """ImageNet's `--resume PATH` takes a value: no bare --resume; a flag --seed (no value) gets no
    number."""
    actions = [
        {"options": ["--resume"], "nargs": None, "metavar": "PATH"},
        {"options": ["--seed"], "nargs": 0},
        {"options": ["--epochs"], "nargs": None},
        {"options": ["--stop-after-steps"], "nargs": "?"},
    ]
    c, notes = adapt_contract(Contract(), ParserProbe(actions, "from its parser"))
    assert (c.resume, c.seed, c.epochs, c.stop_after_steps) == (
        "",
        "",
        "--epochs {epochs}",
        "--stop-after-steps {steps}",
    )
    assert any(
        n.startswith(
            "--resume takes a value (PATH), not a bare flag: seeder's helpers resume "
            "($SEEDER_RESUME"
        )
        and "--arg resume='--resume {ckpt_dir}/FILE'" in n
        for n in notes
    ), notes
    assert (
        "--seed takes no value, not as verify passes it: the seed goes through $SEEDER_SEED"
        in notes
    )
    flag, _ = adapt_contract(
        Contract(), ParserProbe([{"options": ["--resume"], "nargs": 0}], "from its parser")
    )
    assert flag.resume == "--resume"


def test_unknown_flags_leave_every_default_flag_to_seeder():
    why = "`python t.py` reached its first optimizer step before any argument parser"
    c, notes = adapt_contract(Contract(), ParserProbe(None, why))
    assert all(getattr(c, n) == "" for n in TEMPLATE_NAMES)
    assert notes == [
        f"flags not known ({why}): the runs are driven through seeder's environment variables"
    ]
    kept, _ = adapt_contract(Contract(seed="--random-seed {seed}"), ParserProbe(None, "not known"))
    assert kept.seed == "--random-seed {seed}" and kept.epochs == ""


def test_stops_are_after_the_first_epoch_and_untested_pairs_say_why(tmp_path):
    two = Metrics([(k,) for k in range(1, 13)], np.zeros(12), [k // 6 for k in range(12)])
    assert stop_steps(two) == ((6, "the end of epoch 0"), (9, "3 of 6 steps into epoch 1"))
    one = Metrics([(1,), (2,)], np.zeros(2), [0, 0])
    assert "too few" in stop_steps(one)[1][1]
    stop, res = tmp_path / "mid-0", tmp_path / "resume-mid-0"
    stop.mkdir(), res.mkdir()
    assert (
        untested(stop, res, 9, resume_flag=False) == NO_RESUME
    )  # nothing stopped it, no resume option
    assert untested(stop, res, 9, resume_flag=True) == NO_STOP.format(
        step=9, ran="no recorded step"
    )
    (stop / "steps.jsonl").write_text(json.dumps({"seeder_verify": "stopped", "at_step": 9}) + "\n")
    assert untested(stop, res, 9, resume_flag=False) == NO_RESUME  # stopped, but nothing resumed
    (res / "steps.jsonl").write_text(json.dumps({"seeder_verify": "resumed", "at_step": 9}) + "\n")
    assert untested(stop, res, 9, resume_flag=False) is None
    assert NO_RESUME.startswith("no resume option; map one with --arg resume=")


def _loop(path, ckpt_resume):
    seeder.init(master_seed=5)
    seeder.reseed(0, 0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Dropout(0.3), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = seeder.DataLoader(
        torch.linspace(-1, 1, 12)[:, None].repeat(1, 2), batch_size=3, shuffle=True
    )
    ckpt = seeder.Checkpoint(path, model=model, optimizer=opt)
    start = ckpt.resume(ckpt_resume)
    losses = []
    for epoch in range(start, 2):
        seeder.reseed(1, epoch)
        for x in loader:
            loss = model(x + 0.1 * torch.randn_like(x)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            ckpt.step()
    return losses, seeder.digest(model, opt)


def test_checkpoint_stops_for_verify_and_resumes_bit_for_bit(
    tool_hooks, tmp_path, fresh_default, monkeypatch
):
    steps = tmp_path / "steps.jsonl"
    monkeypatch.setenv(stepwatch.ENV_STEPS, str(steps))
    full, digest = _loop(tmp_path / "a.pt", False)
    gc.collect()
    monkeypatch.setenv(stepwatch.ENV_STOP, "6")  # 4 steps an epoch: 2 into epoch 1
    code = None
    try:
        _loop(tmp_path / "b.pt", False)
    except SystemExit as exc:  # (no traceback kept: its frames would keep the loader joined)
        code = exc.code
    gc.collect()  # a new process starts here: the stopped run's loader is gone
    assert code == 0 and stepwatch.read_marks(steps) == {"stopped": 6}
    monkeypatch.delenv(stepwatch.ENV_STOP)
    monkeypatch.setenv(stepwatch.ENV_RESUME, "1")
    rest, resumed = _loop(tmp_path / "b.pt", None)  # resume() loads because verify asks
    assert rest == full[6:] and resumed == digest
    records = [json.loads(line) for line in steps.read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r][-2:] == [
        7,
        8,
    ]  # the counter went on from the checkpoint
    stepwatch.del_env()


def test_checkpoint_save_removes_the_halves_of_killed_writes(tmp_path, fresh_default):
    seeder.init(master_seed=2)
    seeder.reseed(1, 0)
    model = torch.nn.Linear(2, 1)
    (tmp_path / ".last.pt.999999.tmp").write_bytes(b"half")  # a write killed before its rename
    (tmp_path / ".other.pt.999999.tmp").write_bytes(b"half")  # another file's: left alone
    seeder.Checkpoint(tmp_path / "last.pt", model=model).save()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.pt.999999.tmp", "last.pt"]


def test_the_probe_runs_the_script_a_launcher_would_start_never_the_launcher(tmp_path):
    (tmp_path / "train.py").write_text("")
    probe = str(Path(seeder.verify._flags.__file__).with_name("_probe.py"))
    for launcher in (
        ["torchrun", "--standalone", "--nproc-per-node", "2"],
        ["python", "-m", "torch.distributed.run", "--nproc-per-node", "2"],
        ["accelerate", "launch"],
    ):
        assert probe_argv(launcher + ["train.py", "--lr", "1"], tmp_path) == (
            [sys.executable, probe, "{report}", "train.py", "--lr", "1"],
            "",
        )
    assert probe_argv(["python3", "-u", "-X", "dev", "train.py"], tmp_path)[0] == [
        "python3",
        "-u",
        "-X",
        "dev",
        probe,
        "{report}",
        "train.py",
    ]
    assert probe_argv(["python", "-m", "pkg.train", "--a"], tmp_path)[0] == [
        "python",
        probe,
        "{report}",
        "-m",
        "pkg.train",
        "--a",
    ]
    for no in (["python", "-c", "pass"], ["bash", "run.sh"], ["torchrun", "missing.py"]):
        assert probe_argv(no, tmp_path)[0] is None


def test_the_probe_keeps_every_pythonpath_entry(tmp_path):
    # A script that imports a module found only through PYTHONPATH is probed like any other.
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "probe_only_on_pythonpath.py").write_text("")
    script = ["import argparse", "import probe_only_on_pythonpath", "p = argparse.ArgumentParser()"]
    script += ["p.add_argument('--seed')", "p.parse_args()"]
    (tmp_path / "train.py").write_text("\n".join(script) + "\n")
    env = dict(os.environ, PYTHONPATH=str(lib))
    probe = probe_parser([sys.executable, "train.py"], tmp_path, tmp_path, env)
    assert probe.actions is not None, probe.how
    assert ["--seed"] in [a["options"] for a in probe.actions]
