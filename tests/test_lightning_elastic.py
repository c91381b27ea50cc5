"""SeederCallback with an elastic seeder.DataLoader: a Lightning checkpoint of 2 processes resumes on 1 process.

An uninterrupted fit on 2 processes (Lightning's ``strategy="ddp"``, gloo on 127.0.0.1, Lightning's
launcher) saves a checkpoint after every step; this process resumes the checkpoints of step 1 (inside
epoch 0) and step 3 (the end of epoch 0). Every sample of the two epochs is trained once and its tensor
(augmentation from random, NumPy and torch) is bit for bit the uninterrupted run's, and inside an epoch
the main process's streams at the first resumed step are the re-derived ones. A 2-process fit
costs tens of seconds on a loaded CPU, so 1 -> 2 (``lightning_elastic.py OUT 2 full 1:1`` after
``OUT 1 full``) is not part of the suite.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

import seeder  # noqa: E402
from helpers import communicate, trained_samples  # noqa: E402
from seeder.world import rederive_streams  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import lightning_elastic as child  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:lightning", "ignore::DeprecationWarning")


@pytest.mark.slow
def test_lightning_elastic_resume_on_another_number_of_processes(tmp_path):
    gc.collect()  # loaders of earlier tests leave the default seeder
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "lightning_elastic.py"), str(tmp_path), "2", "full"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = communicate(proc, 300)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    child.main(str(tmp_path), 1, ["2:1", "2:3"])
    gc.collect()

    every = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.SAMPLES)})
    ref, count = trained_samples([tmp_path / f"full2_{r}.pt" for r in range(2)])
    assert count == every
    assert len({ref[(0, i)].sum().item() for i in range(child.SAMPLES)}) == child.SAMPLES

    for saved, step, now in ((2, 1, 1), (2, 3, 1)):
        _, trained = trained_samples([tmp_path / f"full{saved}_{r}.pt" for r in range(saved)],
                                     keep=lambda epoch, at, upto=step: at <= upto)
        assert sum(trained.values()) == step * child.GLOBAL_BATCH
        resumed, count = trained_samples([tmp_path / f"resume{saved}_{step}to{now}_{r}.pt" for r in range(now)])
        assert trained + count == every, (saved, step, now)  # every sample once: none lost, none repeated
        assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, step, now)

    # Inside an epoch, the main process's streams at the first resumed step are the re-derived ones.
    ckpt = torch.load(tmp_path / "ckpt2" / "step=1.ckpt", weights_only=False)
    entry = ckpt["callbacks"]["SeederCallback"]["seeder"]["ranks"][0]
    assert entry["world_size"] == 2 and list(entry["last_reseed"]) == [1, 0]
    with seeder.Seeder().fork_rng():
        s = seeder.Seeder()
        s.init(child.SEED)
        rederive_streams(entry, s, 1)  # global step 1: 8 of the epoch's samples done
        expected = child.probe()
    assert torch.equal(torch.load(tmp_path / "probe_resume2_1to1_0.pt", weights_only=True), expected)
