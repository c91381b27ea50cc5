"""SeederCallback with the real Lightning Trainer: repeat, unseeded, stop and resume bit for bit,
ddp, refusals; Fabric."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

import lightning.pytorch as pl  # noqa: E402

import seeder  # noqa: E402
from seeder._errors import SeederWarning, StateError  # noqa: E402
from seeder.integrations.lightning import SeederCallback  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
from lightning_common import BATCH, NoisyDataset, run, seeder_loader  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:lightning", "ignore::DeprecationWarning"),
    pytest.mark.xdist_group("lightning"),  # one worker builds the module's runs
]


def same(a, b, start=0):
    """Losses of ``b`` equal ``a``'s from step ``start`` on, and the final weights are equal, bit
    for bit."""
    return a["losses"][start:] == b["losses"] and all(
        torch.equal(a["weights"][k], b["weights"][k]) for k in a["weights"]
    )


def quick_loader():
    return seeder_loader(workers=0)


@pytest.fixture
def fresh():
    yield
    gc.collect()  # loaders of earlier fits leave the default seeder


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted seeded run (2 epochs x 6 steps, 2 workers), with a Lightning checkpoint
    after every step."""
    ckpt = tmp_path_factory.mktemp("ckpt")
    result = run(3, ckpt_dir=str(ckpt))
    result["ckpt"] = ckpt
    gc.collect()
    return result


@pytest.mark.slow
def test_seeded_repeat_is_identical(reference, fresh):
    assert len(reference["losses"]) == 12
    assert same(reference, run(3))


@pytest.mark.slow
def test_unseeded_runs_differ(fresh):
    a, b = run(None), run(None)
    assert a["losses"] != b["losses"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [3, 6, 9])  # mid-epoch 0, the epoch boundary, mid-epoch 1
def test_resume_from_lightning_checkpoint_is_bitwise(reference, step, fresh):
    resumed = run(3, ckpt_path=str(reference["ckpt"] / f"step={step}.ckpt"))
    assert [s for s, _ in resumed["losses"]] == list(range(step + 1, 13))
    assert same(reference, resumed, step)


@pytest.mark.slow
def test_stop_then_resume_is_bitwise(reference, tmp_path, fresh):
    stopped = run(
        3, ckpt_dir=str(tmp_path), max_steps=4, every=4
    )  # a run that really stops at step 4
    assert stopped["losses"] == reference["losses"][:4]
    resumed = run(3, ckpt_path=str(tmp_path / "step=4.ckpt"))
    assert same(reference, resumed, 4)


@pytest.mark.slow
def test_resume_without_the_callback_diverges(reference, fresh):
    """The test above has teeth: without SeederCallback the same resume is not exact."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resumed = run(3, ckpt_path=str(reference["ckpt"] / "step=3.ckpt"), callbacks=[])
    assert resumed["losses"] != reference["losses"][3:]


@pytest.mark.slow
def test_ddp_two_processes_resume_bitwise(tmp_path, framework_scripts):
    """Rank 0 is a fresh Python (``framework_scripts``); Lightning's launcher starts rank 1 as its
    own Python, as it does for any script (which hands its script over to the framework handoff
    server only where ``SEEDER_TEST_FORKSERVER=1`` opts in, locally)."""
    from handoff import handoff_server

    proc = framework_scripts.run(
        [SCRIPTS / "lightning_ddp.py", tmp_path, "--seed", "3", "--resume-from", "4", "3"],
        env={"MASTER_ADDR": "127.0.0.1", **handoff_server(frameworks=True).env()},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    full = torch.load(tmp_path / "full.pt", weights_only=True)
    assert (
        full["world"] == 2 and full["sampler_replicas"] == 2
    )  # Lightning kept seeder's sampler, sharded by rank
    assert len(full["losses"]) == 6  # 24 samples / 2 ranks / batch 4 = 3 steps an epoch
    for step in (4, 3):  # mid-epoch 1, and the epoch boundary
        assert same(full, torch.load(tmp_path / f"resume{step}.pt", weights_only=True), step)


# ------------------------------------------------------------------------------------- refusals
def test_plain_torch_loader_warns(fresh):
    def plain():
        return torch.utils.data.DataLoader(NoisyDataset(), batch_size=BATCH, shuffle=True)

    with pytest.warns(SeederWarning, match="not a seeder.DataLoader"):
        run(3, loader_factory=plain, max_steps=1)


def test_loader_sharded_for_another_world_is_refused(fresh):
    def sharded():
        ds = NoisyDataset()
        return seeder.DataLoader(
            ds, batch_size=BATCH, sampler=seeder.DistributedSampler(ds, num_replicas=2, rank=0)
        )

    with pytest.raises(RuntimeError, match="sharded as rank 0 of 2.*inside train_dataloader"):
        run(3, loader_factory=sharded, max_steps=1)


def test_seeder_world_differs_from_trainer_is_refused(fresh):
    seeder.init(3, ngpus=2, local_rank=0)
    seeder.reseed(0, 0)
    from lightning_common import Net

    trainer = pl.Trainer(
        max_steps=1,
        callbacks=[SeederCallback()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    with pytest.raises(
        RuntimeError, match="seeder has rank 0 of 2 but this Trainer process is rank 0 of 1"
    ):
        trainer.fit(Net(quick_loader))


def test_overfit_batches_is_refused(fresh):
    with pytest.raises(RuntimeError, match="overfit_batches"):
        run(3, loader_factory=quick_loader, max_steps=1, overfit_batches=2)


@pytest.fixture(scope="module")
def quick_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("quick")
    run(3, ckpt_dir=str(d), loader_factory=quick_loader, max_steps=2, every=2)
    gc.collect()
    return d / "step=2.ckpt"


def test_checkpoint_from_another_world_size_is_refused(quick_ckpt, tmp_path, fresh):
    ck = torch.load(quick_ckpt, weights_only=False)
    ck["callbacks"]["SeederCallback"]["seeder"]["world_size"] = 2
    torch.save(ck, tmp_path / "other.ckpt")
    with pytest.raises(StateError, match="saved by 2 process.*this run has 1"):
        run(3, ckpt_path=str(tmp_path / "other.ckpt"), loader_factory=quick_loader)


def test_checkpoint_from_another_master_seed_is_refused(quick_ckpt, fresh):
    with pytest.raises(StateError, match="master seed 3.*pass master_seed=3"):
        run(4, ckpt_path=str(quick_ckpt), loader_factory=quick_loader)


def test_checkpoint_without_seeder_state_warns(quick_ckpt, tmp_path, fresh):
    ck = torch.load(quick_ckpt, weights_only=False)
    del ck["callbacks"]["SeederCallback"]
    torch.save(ck, tmp_path / "bare.ckpt")
    with pytest.warns(SeederWarning, match="holds no seeder state"):
        run(3, ckpt_path=str(tmp_path / "bare.ckpt"), loader_factory=quick_loader)


def test_checkpoint_loads_weights_only(quick_ckpt):
    state = torch.load(quick_ckpt, weights_only=True)["callbacks"]["SeederCallback"]
    assert state["seeder"]["world_size"] == 1
    assert all(
        not k.startswith("loader.") for k in state["seeder"]["ranks"][0]["participants"]
    )  # Lightning carries those


@pytest.mark.slow
def test_import_seeder_does_not_import_lightning():
    code = (
        "import sys, seeder; seeder.DataLoader; seeder.init(1); assert 'lightning' not in "
        "sys.modules, 'imported'"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )


# ------------------------------------------------------------------------- resume_path (seeder
# verify's resume)
def test_resume_path_resumes_where_seeder_verify_stopped_the_run(
    tool_hooks, tmp_path, monkeypatch, fresh
):
    """A plain script's `fit(ckpt_path=resume_path(args.ckpt_path))` under verify's variables: stop,
    resume, exact."""
    import json

    from seeder._run import steps as stepwatch
    from seeder.integrations.lightning import resume_path

    for name in (
        stepwatch.ENV_STEPS,
        stepwatch.ENV_STOP,
        stepwatch.ENV_RESUME,
        stepwatch.ENV_CKPT_DIR,
    ):
        monkeypatch.delenv(name, raising=False)
    assert (
        resume_path() is None and resume_path("mine.ckpt") == "mine.ckpt"
    )  # outside verify: what the user gave
    full = run(3, loader_factory=quick_loader)
    steps = tmp_path / "steps.jsonl"
    monkeypatch.setenv(stepwatch.ENV_STEPS, str(steps))
    monkeypatch.setenv(stepwatch.ENV_CKPT_DIR, str(tmp_path / "ckpt"))
    monkeypatch.setenv(
        stepwatch.ENV_STOP, "4"
    )  # verify's run (2b): stop inside epoch 0 (6 steps an epoch)
    try:
        with pytest.raises(SystemExit) as stop:
            run(3, loader_factory=quick_loader, ckpt_path=resume_path())
        assert stop.value.code == 0 and (tmp_path / "ckpt" / "seeder-stop.ckpt").is_file()
        monkeypatch.delenv(stepwatch.ENV_STOP)
        monkeypatch.setenv(stepwatch.ENV_RESUME, "1")  # verify's run (3b)
        assert resume_path() == str(tmp_path / "ckpt" / "seeder-stop.ckpt")
        assert resume_path("mine.ckpt") == "mine.ckpt"  # a checkpoint the user names wins
        resumed = run(3, loader_factory=quick_loader, ckpt_path=resume_path())
        assert same(full, resumed, 4) and [s for s, _ in resumed["losses"]] == list(range(5, 13))
        marks = [
            (r["seeder_verify"], r["at_step"])
            for r in map(json.loads, steps.read_text().splitlines())
            if "seeder_verify" in r
        ]
        assert marks == [
            ("stopped", 4),
            ("loaded", 4),
            ("resumed", 4),
        ]  # loaded: the state the stopped run saved
        monkeypatch.setenv(stepwatch.ENV_CKPT_DIR, str(tmp_path / "elsewhere"))
        with pytest.warns(SeederWarning, match="no .*seeder-stop.ckpt.*put SeederCallback"):
            assert resume_path() is None
    finally:
        stepwatch.del_env()


# ----------------------------------------------------------------------------------------- Fabric
def fabric_train(tmp_path, stop_at=None, resume=False, setup_dataloaders=False):
    """docs/lightning.md's Fabric recipe with the module-level seeder, 2 workers, 2 epochs x 6
    steps."""
    from lightning.fabric import Fabric
    from lightning_common import Net

    gc.collect()  # loaders of earlier runs in this process leave the default seeder
    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.launch()
    seeder.init(master_seed=11, ngpus=fabric.world_size)
    seeder.reseed(0, 0)
    model = Net(None).net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    loader = seeder_loader(workers=2)
    if setup_dataloaders:
        loader = fabric.setup_dataloaders(loader)
    state = {"model": model, "optimizer": optimizer, "epoch": 0, "step": 0}
    if resume:
        rest = fabric.load(tmp_path / "fabric.ckpt", state)
        seeder.load_state_dict(rest["seeder"])
    losses = []
    for epoch in range(state["epoch"], 2):
        seeder.reseed(1, epoch)
        for x, y in loader:
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
            state["step"] += 1
            losses.append(loss.item())
            if state["step"] == stop_at:
                state["epoch"] = (
                    epoch  # a finished epoch: the resumed loader yields nothing more of it
                )
                fabric.save(
                    tmp_path / "fabric.ckpt", {**state, "seeder": seeder.gather_state_dict()}
                )
                return losses
    return losses


@pytest.mark.slow
def test_fabric_recipe_resumes_bitwise(tmp_path):
    full = fabric_train(tmp_path)
    assert len(full) == 12
    for stop in (6, 8):  # the epoch boundary, mid-epoch 1
        assert fabric_train(tmp_path, stop_at=stop) == full[:stop]
        assert fabric_train(tmp_path, resume=True) == full[stop:]


@pytest.mark.slow
def test_fabric_setup_dataloaders_breaks_resume(tmp_path):
    """Why the recipe keeps the loader out of setup_dataloaders: its wrapper restarts set_epoch at 0
    on resume."""
    full = fabric_train(tmp_path, setup_dataloaders=True)
    fabric_train(tmp_path, stop_at=8, setup_dataloaders=True)
    assert fabric_train(tmp_path, resume=True, setup_dataloaders=True) != full[8:]
