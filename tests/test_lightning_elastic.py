"""SeederCallback with an elastic seeder.DataLoader: a Lightning checkpoint of 2 processes resumes
on 1, and 1 on 2.

One set of runs serves every test (a module fixture): a fit on 1 process and an uninterrupted
fit on 2 processes (Lightning's ``strategy="ddp"``, gloo on 127.0.0.1, Lightning's launcher) save a
checkpoint after every step; the 2 processes then resume the 1-process checkpoint of step 1 (inside
epoch 0: 1 -> 2), and 1 process the 2-process checkpoints of step 1 (inside epoch 0) and step 3 (the
end of epoch 0: 2 -> 1). Both fits give every sample the same tensor; every sample of the two epochs
is trained once and its tensor (augmentation from random, NumPy and torch) is bit for bit the
uninterrupted run's, and inside an epoch each rank's main-process streams at the first resumed step
are the re-derived ones.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

from handoff import handoff_server  # noqa: E402
from helpers import child_env, communicate, trained_samples  # noqa: E402

import seeder  # noqa: E402
from seeder._state.world import rederive_streams  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import lightning_elastic as child  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:lightning", "ignore::DeprecationWarning"),
    pytest.mark.xdist_group("lightning_elastic"),  # one worker builds the module's runs
]
EVERY = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.SAMPLES)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, framework_scripts):
    """The folder of the runs: full1, full2, resume1_1to2 (2 processes), resume2_1to1 and
    resume2_3to1. The runs that resume are fresh Pythons: the 1-process resumes through
    ``framework_scripts``, the 2-process run's interpreters (this test's and the one Lightning's
    launcher starts) as started (each hands its script over to the framework handoff server only
    where ``SEEDER_TEST_FORKSERVER=1`` opts in, locally). full1 forks from the session's server."""
    out = tmp_path_factory.mktemp("lightning_elastic")
    script = str(SCRIPTS / "lightning_elastic.py")
    framework_scripts.run(
        [script, str(out), "1", "full"], timeout=300, start_is_subject=False
    )  # no resume
    env = dict(
        child_env(),  # this checkout first on PYTHONPATH
        **handoff_server(frameworks=True).env(),  # empty unless opted in
        MASTER_ADDR="127.0.0.1",
        OMP_NUM_THREADS="1",
        PYTHONFAULTHANDLER="1",
    )
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "lightning_elastic.py"), str(out), "2", "full", "1:1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = communicate(proc, 300)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    framework_scripts.run([script, str(out), "1", "2:1", "2:3"], timeout=300)
    return out


def check_resume(out: Path, saved: int, step: int, now: int) -> None:
    """Every sample of the two epochs once over the saved run's first ``step`` steps and the resumed
    run, each resumed tensor equal to the uninterrupted 2-process run's."""
    ref, _ = trained_samples([out / f"full2_{r}.pt" for r in range(2)])
    _, trained = trained_samples(
        [out / f"full{saved}_{r}.pt" for r in range(saved)], keep=lambda epoch, at: at <= step
    )
    assert sum(trained.values()) == step * child.GLOBAL_BATCH
    resumed, count = trained_samples(
        [out / f"resume{saved}_{step}to{now}_{r}.pt" for r in range(now)]
    )
    assert trained + count == EVERY, (
        saved,
        step,
        now,
    )  # every sample once: none lost, none repeated
    assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, step, now)


def expected_probe(out: Path, saved: int, step: int, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank`` of ``world``'s main-process draws at the first step resumed from
    ``step=<step>.ckpt``."""
    ckpt = torch.load(out / f"ckpt{saved}" / f"step={step}.ckpt", weights_only=False)
    entry = ckpt["callbacks"]["SeederCallback"]["seeder"]["ranks"][0]
    assert entry["world_size"] == saved and list(entry["last_reseed"]) == [1, 0]
    with seeder.Seeder().fork_rng():
        s = seeder.Seeder()
        s.init(child.SEED, ngpus=world, rank=rank)
        rederive_streams(entry, s, step)  # global step `step` of the epoch
        return child.probe()


@pytest.mark.slow
def test_the_same_data_on_one_and_two_processes(runs):
    ref, count = trained_samples([runs / f"full2_{r}.pt" for r in range(2)])
    assert count == EVERY
    assert len({ref[(0, i)].sum().item() for i in range(child.SAMPLES)}) == child.SAMPLES
    other, count = trained_samples([runs / "full1_0.pt"])
    assert count == EVERY and all(torch.equal(other[k], ref[k]) for k in EVERY)


@pytest.mark.slow
def test_two_processes_resume_on_one(runs):
    for step in (1, 3):
        check_resume(runs, 2, step, 1)
    # Inside an epoch, the main process's streams at the first resumed step are the re-derived ones.
    got = torch.load(runs / "probe_resume2_1to1_0.pt", weights_only=True)
    assert torch.equal(got, expected_probe(runs, 2, 1, 0, 1))


@pytest.mark.slow
def test_one_process_resumes_on_two(runs):
    check_resume(runs, 1, 1, 2)
    probes = [torch.load(runs / f"probe_resume1_1to2_{r}.pt", weights_only=True) for r in range(2)]
    for r in range(2):  # each rank's streams re-derived for its own rank
        assert torch.equal(probes[r], expected_probe(runs, 1, 1, r, 2)), r
    assert not torch.equal(probes[0], probes[1])
