"""SeederAccelerator with elastic loaders: a checkpoint saved on 2 processes resumes on 1, and 1 on 2, with the same data.

The one-process runs run in this process (accelerate without a launcher), the two-process run under
torchrun (gloo on 127.0.0.1): uninterrupted runs on 1 and 2 processes save ``accelerator.save_state`` inside
epoch 0; the 2-process run then resumes the 1-process checkpoint (1 -> 2) and this process the 2-process one
(2 -> 1). Every sample of the epoch is trained once and its tensor (augmentation from random, NumPy and
torch) is bit for bit the uninterrupted run's; a default-mode loader's checkpoint is refused across the change.
"""
from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
import torch

pytest.importorskip("accelerate")

import seeder  # noqa: E402

from helpers import REPO_ROOT, torchrun, trained_samples  # noqa: E402

SCRIPT = "tests/scripts/accelerate_elastic.py"
_spec = importlib.util.spec_from_file_location("accelerate_elastic", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]


@pytest.mark.slow
def test_accelerate_elastic_resume_on_another_number_of_processes(tmp_path):
    out = str(tmp_path)
    with seeder.Seeder().fork_rng():
        child.main(out, ["full"])
    torchrun([SCRIPT, out, "full", "1", "plain1"], nproc=2)  # 1 -> 2
    with seeder.Seeder().fork_rng():
        child.main(out, ["2", "plain2"])                     # 2 -> 1

    every = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.N)})
    ref, count = trained_samples([tmp_path / "full1_0.pt"])
    assert count == every
    other, count = trained_samples([tmp_path / f"full2_{r}.pt" for r in range(2)])
    assert count == every and all(torch.equal(other[k], ref[k]) for k in every)  # the same data on 1 and 2
    assert len({ref[(0, i)].sum().item() for i in range(child.N)}) == child.N

    for saved, now in ((2, 1), (1, 2)):
        _, trained = trained_samples([tmp_path / f"full{saved}_{r}.pt" for r in range(saved)],
                                     keep=lambda epoch, step: (epoch, step) <= (0, child.STOP))
        assert sum(trained.values()) == (child.STOP + 1) * child.GLOBAL_BATCH
        resumed, count = trained_samples([tmp_path / f"resume{saved}to{now}_{r}.pt" for r in range(now)])
        assert trained + count == every, (saved, now)  # every sample of the two epochs once: none lost, none repeated
        assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, now)
        for r in range(now):
            refused = (tmp_path / f"refused{saved}to{now}_{r}.txt").read_text()
            assert "nothing was changed" in refused and "elastic" in refused, refused

    # 2 -> 1: the main process's streams are seeder's re-derived ones, not rank 0's saved random_states_0.pkl.
    state = torch.load(tmp_path / "ckpt2" / "seeder_state_0.pt", weights_only=True)
    with seeder.Seeder().fork_rng():
        ref_seeder = seeder.Seeder()
        ref_seeder.init(child.SEED)
        loader = seeder.DataLoader(child.Indexed(), batch_size=child.GLOBAL_BATCH, shuffle=True, elastic=True,
                                   seeder=ref_seeder)
        ref_seeder.load_state_dict(state)
        expected = child.probe()
    assert torch.equal(torch.load(tmp_path / "probe2to1_0.pt", weights_only=True), expected)
    assert loader.state_dict()["samples_done"] == (child.STOP + 1) * child.GLOBAL_BATCH
