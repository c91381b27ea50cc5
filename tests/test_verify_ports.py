"""seeder verify on three real script shapes, ported in a few lines, and broken once each; and what
verify leaves (and does not touch) in the user's folder.

The ports (``tests/scripts/port_*.py``): a DDPM-like loop with an EMA through accelerate, a
two-model GAN with BatchNorm and fixed noise, an RNN with a hand-written update and a hidden state
carried across batches. Each PASSes; each broken version FAILs with a reason that names the object
and the step (or the run) where it differs. Every session is the real ``seeder verify``: 8 runs
(2 repeats, 1 repeat of the stopped and resumed runs), 18 steps each.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT, cli
from optional import need, need_verify

need_verify(figures=False)  # every run here passes figures=False
from seeder.verify import RunFailed, VerifyConfig, verify  # noqa: E402

pytestmark = pytest.mark.slow

SCRIPTS = REPO_ROOT / "tests" / "scripts"
QUICK = dict(repeats=2, resume_repeats=1, jobs=2, progress=False, figures=False)


@pytest.fixture
def handed_off(handoff_kept, monkeypatch):
    """Each Python that verify starts hands its script to the session's handoff server (torch
    imported once), in CI too: these tests' subject is what verify compares, not the interpreters'
    start."""
    for name, value in handoff_kept.env().items():
        monkeypatch.setenv(name, value)


def checks(report):
    return {c["name"]: c["status"] for c in report["checks"]}


def port(tmp_path, name, *args, **kw):
    started = time.monotonic()
    rep = verify(
        VerifyConfig(
            command=[sys.executable, str(SCRIPTS / name), *args],
            out=tmp_path / "v",
            cwd=tmp_path,
            **{**QUICK, **kw},
        )
    )
    print(f"seeder verify {name} {' '.join(args)}: {time.monotonic() - started:.1f}s")
    return rep


ALL_PASS = {
    "reproducible": "PASS",
    "resume": "PASS",
    "resume-mid-epoch": "PASS",
    "variance": "PASS",
}


# --- the GAN: two models, two optimizers, BatchNorm, fixed noise, sample files
# ---------------------------------------------------------------------------


def test_the_gan_port_passes_over_both_models_optimizers_and_sample_files(tmp_path, handed_off):
    rep = port(tmp_path, "port_gan.py", stop_after_steps=13)
    assert rep["verdict"] == "PASS", rep["reasons"]
    compared = rep["compared"]
    assert {"netG", "netD", "optimizerD", "optimizerG"} <= set(compared["objects"])
    assert "samples/fake_samples_epoch_002.pgm" in compared["files"]
    # Two optimizers, one step: the stop asked after step 13 happens at 13, and the table and the
    # report say 13.
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["mid-0"]["stop_after_steps"] == 13
    steps = [
        json.loads(line)
        for line in (tmp_path / "v" / "runs" / "mid-0" / "steps.jsonl").read_text().splitlines()
    ]
    assert {"seeder_verify": "stopped", "at_step": 13} in steps
    assert max(r["step"] for r in steps if "step" in r) == 13
    mid = next(c for c in rep["checks"] if c["name"] == "resume-mid-epoch")
    assert "step 13" in mid["summary"], mid["summary"]
    assert "step 13" in (tmp_path / "v" / "report.md").read_text()


def test_a_gan_that_restarts_enumerate_after_a_resume_fails_naming_the_generator(
    tmp_path, handed_off
):
    """DCGAN's enumerate(dataloader, 0) after a mid-epoch resume: the sampling block (the generator
    in train mode) runs at another step, the batch-norm buffers differ, the losses do not."""
    rep = port(tmp_path, "port_gan.py", "--bug", "enumerate")
    assert checks(rep)["resume-mid-epoch"] == "FAIL" and checks(rep)["resume"] == "PASS"
    reason = next(r for r in rep["reasons"] if "mid-epoch" in r)
    assert "the resumed run (3b) differs from the uninterrupted run (1) in 'netG'" in reason
    assert "its buffers" in reason and "from step 10 on (resumed after step 9)" in reason


# --- the RNN: a hand-written update (no torch optimizer), a hidden state carried across batches
# ---------------------------------------------------------------------------------------------


def test_the_rnn_port_with_a_hand_written_update_is_counted_stopped_and_passes(
    tmp_path, handed_off
):
    # The script takes no --epochs: X = 1 is not refused, the script runs its own 3 epochs.
    rep = port(tmp_path, "port_rnn.py", epochs=1)
    assert rep["verdict"] == "PASS", rep["reasons"]
    assert checks(rep) == ALL_PASS
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["half-0"]["stop_after_steps"] == 6 and runs["full-0"]["steps"] == 18
    compared = set(rep["compared"]["objects"])
    assert {"model", "checkpoint values['hidden']", "checkpoint values['best']"} <= compared


def test_an_rnn_with_a_clock_seeded_generator_fails_at_step_1(tmp_path, handed_off):
    rep = port(tmp_path, "port_rnn.py", "--bug", "clock", mid_epoch=False)
    assert checks(rep)["reproducible"] == "FAIL"
    assert any(
        r.startswith(
            "seeded run full-1 differs from full-0 in 'clock' (torch.Generator, one seeder"
        )
        and "from step 1 on" in r
        for r in rep["reasons"]
    ), rep["reasons"]


# --- the DDPM-like loop: accelerate, an EMA, random timesteps and noise
# ---------------------------------------------------------------------------


def test_the_ddpm_port_passes_over_the_ema_and_its_sample(tmp_path, handed_off):
    need("accelerate")
    rep = port(tmp_path, "port_ddpm.py")
    assert rep["verdict"] == "PASS", rep["reasons"]
    assert {"model", "ema", "optimizer", "lr_scheduler"} <= set(rep["compared"]["objects"])
    assert rep["compared"]["files"] == ["samples/ema.pt"]


def test_a_ddpm_loop_whose_checkpoint_lacks_the_ema_fails_naming_it(tmp_path, handed_off):
    """The model, optimizer and losses resume exactly; only the EMA differs (on main: PASS)."""
    need("accelerate")
    rep = port(tmp_path, "port_ddpm.py", "--bug", "no-ema", mid_epoch=False)
    assert checks(rep)["resume"] == "FAIL" and checks(rep)["reproducible"] == "PASS"
    resume = next(c for c in rep["checks"] if c["name"] == "resume")
    assert (
        "bitwise identical" in resume["summary"]
        and "'ema' differs from step 7" in resume["summary"]
    ), resume["summary"]
    assert resume["reasons"] == [
        "repeat 0: the resumed run (3) differs from the uninterrupted run (1) in 'ema' (nn.Module "
        "AveragedModel: its parameters and buffers) from step 7 on (resumed after step 6): the "
        "checkpoint does not save or restore it, or the loop changes it after a resume"
    ]


# --- the user's folder: never changed, never piled up, nothing of it left in --out
# ---------------------------------------------------------------------------------

NOTES = """\
import os, sys
import torch
import seeder

seeder.init()
seeder.reseed(0, 0)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
assert open("deploy.cfg").read().startswith("[deploy]")  # read through the mirror
assert not os.path.exists(".netrc")  # a credential file: left out of the runs' folders
with open("data/big.bin", "rb") as fh:  # larger than a run's copies: the shared read-only copy
    total = sum(fh.read())
with open("data/big.sum", "w") as fh:  # written next to it: into the run's own data/
    fh.write(str(total))
ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=opt)
start = ckpt.resume()
for epoch in range(start, 2):
    seeder.reseed(1, epoch)
    for _ in range(ckpt.steps - 4 * epoch, 4):  # a resumed epoch: the steps left
        loss = model(torch.randn(3, 2)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with open("notes.txt", "a") as fh:  # appends to a file of the user's folder
            fh.write(f"step {ckpt.steps + 1} loss {loss.item():.6f}\\n")
        ckpt.step()
"""


def _hashes(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's bytes, a link's target."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "link " + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_verify_changes_no_byte_of_the_users_folder_and_leaves_no_link_to_it(tmp_path, handed_off):
    home = tmp_path / "user"
    home.mkdir()
    (home / "train.py").write_text(NOTES)
    (home / "notes.txt").write_text("my notes\n")
    (home / "deploy.cfg").write_text("[deploy]\npassword = hunter2\n")
    (home / ".netrc").write_text("machine example.com login me password hunter2\n")
    (home / "data").mkdir()
    (home / "data" / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))  # larger than a copy
    (home / "latest").symlink_to("notes.txt")
    # Earlier outputs of verify and locate, whatever their names: never mirrored into a run.
    olds = (
        ("results", ".seeder-verify"),
        ("seeder-locate", ".seeder-locate"),
        ("zz", ".seeder-verify"),
    )
    for name, marker in olds:
        (home / name / "runs" / "full-0").mkdir(parents=True)
        (home / name / marker).write_text("{}\n")
        (home / name / "runs" / "full-0" / "ckpt.pt").write_bytes(b"x" * 1000)
    for i in range(2100):  # more entries than a run mirrors one by one, before zz/
        (home / f"z{i:04d}.txt").write_text("")
    before = _hashes(home)
    rep = verify(
        VerifyConfig(
            command=[sys.executable, str(home / "train.py")], out=home / "out", cwd=home, **QUICK
        )
    )
    assert rep["verdict"] == "PASS", rep["reasons"]
    assert {k: v for k, v in _hashes(home).items() if not k.startswith("out")} == before
    runs = home / "out" / "runs"
    links = [p for p in runs.rglob("*") if p.is_symlink()]
    assert links == []  # nothing in --out leads to the user's files
    out_real = (home / "out").resolve()
    assert all(Path(os.path.realpath(p)).is_relative_to(out_real) for p in out_real.rglob("*"))
    names = {p.name for p in runs.rglob("*")}
    assert not names & {".netrc", "deploy.cfg", "big.bin", "results", "seeder-locate", "zz"}
    assert "z0001.txt" not in names and not (runs / ".shared").exists()
    assert (runs / "full-0" / "data" / "big.sum").read_text() == str(
        sum((home / "data" / "big.bin").read_bytes())
    )
    assert any(".netrc" in n and "--include-secret-files" in n for n in rep["notes"]), rep["notes"]
    # The run's own copy of notes.txt got the lines, and the resumed run continued it: compared.
    assert "notes.txt" in rep["compared"]["files"]
    full = (runs / "full-0" / "notes.txt").read_text()
    assert full.startswith("my notes\nstep 1 ") and full.count("\n") == 9
    assert (runs / "resume-0" / "notes.txt").read_text() == full


WRITES_THROUGH = """\
import torch
import seeder

seeder.init()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = seeder.Checkpoint("ckpt/last.pt", model=model, optimizer=opt)
start = ckpt.resume()
for epoch in range(start, 2):
    seeder.reseed(1, epoch)
    for _ in range(ckpt.steps - 4 * epoch, 4):  # a resumed epoch: the steps left
        model(torch.randn(3, 2)).sum().backward()
        opt.step()
        ckpt.step()
with open("big.bin", "ab") as fh:  # a large file of the user's, reached through its link
    fh.write(b"!")
"""


def test_a_write_into_a_large_file_of_the_users_never_reaches_it(tmp_path, handed_off):
    """A file over the copy limit is one read-only copy the runs share: writing into it fails in
    the run, or (a process that ignores permissions: root) changes only that copy, and the verdict
    is FAIL naming it."""
    home = tmp_path / "user"
    home.mkdir()
    (home / "train.py").write_text(WRITES_THROUGH)
    (home / "big.bin").write_bytes(b"0" * (2 * 1024 * 1024))
    cfg = VerifyConfig(
        command=[sys.executable, str(home / "train.py")],
        out=home / "out",
        cwd=home,
        **{**QUICK, "mid_epoch": False},
    )
    if os.geteuid() != 0:
        with pytest.raises(RunFailed) as failed:
            verify(cfg)
        assert "Permission denied" in failed.value.failed[0].log.read_text()
    else:
        rep = verify(cfg)
        assert rep["verdict"] == "FAIL"
        assert any(
            "the runs wrote into 1 file(s) of the read-only copy" in r and "big.bin" in r
            for r in rep["reasons"]
        ), rep["reasons"]
    assert (home / "big.bin").read_bytes() == b"0" * (2 * 1024 * 1024)  # the user's: untouched
    assert not [p for p in (home / "out").rglob("*") if p.is_symlink()]


HAND_WRITTEN_NO_CKPT = """\
import torch
import seeder

seeder.init()
seeder.reseed(1, 0)
w = torch.zeros(3, requires_grad=True)
for step in range(8):
    loss = (w - torch.randn(3)).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad.zero_()
"""


def test_a_loop_that_seeder_cannot_count_is_said_so_after_its_first_run(
    tmp_path, handed_off, started_in_tmp
):
    """seeder.init() and a hand-written update, no seeder.Checkpoint: what is missing is the
    checkpoint's step(), not seeder.init(); the other runs are left out."""
    script = tmp_path / "train.py"
    script.write_text(HAND_WRITTEN_NO_CKPT)
    rep = verify(VerifyConfig(command=[sys.executable, str(script)], out=tmp_path / "v", **QUICK))
    assert rep["verdict"] == "FAIL"
    reason = rep["reasons"][0]
    assert "The script calls seeder.init(), but steps no torch optimizer and no seeder" in reason
    assert "call ckpt.step() of a seeder.Checkpoint after each training step" in reason
    statuses = {r["name"]: r["status"] for r in rep["runs"]}
    assert statuses.pop("full-0") == "ok" and set(statuses.values()) == {"omitted"}, statuses


def test_a_seed_seeder_init_refuses_is_a_usage_error_before_any_run(capsys, tmp_path):
    rc, out, err = cli(
        capsys,
        [
            "verify",
            "--seed",
            str(2**76),
            "--out",
            str(tmp_path / "v"),
            "--",
            sys.executable,
            str(SCRIPTS / "port_rnn.py"),
        ],
    )
    assert rc == 2, err
    assert err.strip().count("\n") == 0 and "seed must be at most 2**63 - 1" in err
    assert not (tmp_path / "v").exists()
