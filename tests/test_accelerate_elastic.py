"""SeederAccelerator with elastic loaders: a checkpoint saved on 2 processes resumes on 1, 1 on 2,
and 4 on 2.

One set of runs serves every test (a module fixture). The one-process runs run in this process
(accelerate without a launcher), the others under torchrun (gloo on 127.0.0.1): uninterrupted runs
on 1, 2 and 4 processes save ``accelerator.save_state`` inside epoch 0; the 2-process run then
resumes the 1-process checkpoint (1 -> 2) and the 4-process one with 2 loader workers where the runs
had none (4 -> 2, 0 -> 2 workers), and this process the 2-process one (2 -> 1). Every sample of the
epoch is trained once and its tensor (augmentation from random, NumPy and torch) is bit for bit the
uninterrupted run's; the main process's streams at the first resumed step are the re-derived ones; a
default-mode loader's checkpoint is refused across the change.
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import pytest
import torch

pytest.importorskip("accelerate")

from helpers import REPO_ROOT, torchrun, trained_samples  # noqa: E402

import seeder  # noqa: E402
from seeder._state.world import rederive_streams  # noqa: E402

pytestmark = pytest.mark.xdist_group("accelerate_elastic")  # one worker builds the module's runs

SCRIPT = "tests/scripts/accelerate_elastic.py"
_spec = importlib.util.spec_from_file_location("accelerate_elastic", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]
EVERY = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.N)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The folder of the runs: full1, full2, full4, resume1to2, resume4to2 (2 workers), resume2to1,
    the refusals."""
    out = tmp_path_factory.mktemp("accelerate_elastic")
    with seeder.Seeder().fork_rng():
        child.main(str(out), ["full", "default"])
    torchrun([SCRIPT, str(out), "full"], nproc=4, frameworks=True)
    torchrun(
        [SCRIPT, str(out), "full", "default", "1", "4w2", "plain1"], nproc=2, frameworks=True
    )  # 1 -> 2, 4 -> 2
    with seeder.Seeder().fork_rng():
        child.main(str(out), ["2", "plain2"])  # 2 -> 1
    return out


def check_resume(out, saved: int, now: int) -> None:
    """Every sample once over the saved run's first STOP + 1 steps and the resumed run; the tensors
    the reference's."""
    ref, _ = trained_samples([out / "full1_0.pt"])
    _, trained = trained_samples(
        [out / f"full{saved}_{r}.pt" for r in range(saved)],
        keep=lambda epoch, step: (epoch, step) <= (0, child.STOP),
    )
    assert sum(trained.values()) == (child.STOP + 1) * child.GLOBAL_BATCH
    resumed, count = trained_samples([out / f"resume{saved}to{now}_{r}.pt" for r in range(now)])
    assert trained + count == EVERY, (
        saved,
        now,
    )  # every sample of the two epochs once: none lost, none repeated
    assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, now)


def expected_probe(out, saved: int, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank`` of ``world``'s main-process draws right after loading ckpt<saved>: the
    re-derived streams."""
    entry = torch.load(out / f"ckpt{saved}" / "seeder_state_0.pt", weights_only=True)
    assert entry["world_size"] == saved and list(entry["last_reseed"]) == [1, 0]
    with seeder.Seeder().fork_rng():
        s = seeder.Seeder()
        s.init(child.SEED, ngpus=world, rank=rank)
        rederive_streams(entry, s, child.STOP + 1)  # the global step the checkpoint stands at
        return child.probe()


@pytest.mark.slow
def test_the_same_data_on_one_two_and_four_processes(runs):
    ref, count = trained_samples([runs / "full1_0.pt"])
    assert count == EVERY
    assert len({ref[(0, i)].sum().item() for i in range(child.N)}) == child.N
    for world in (2, 4):
        other, count = trained_samples([runs / f"full{world}_{r}.pt" for r in range(world)])
        assert count == EVERY and all(torch.equal(other[k], ref[k]) for k in EVERY), world


@pytest.mark.slow
@pytest.mark.parametrize("saved, now", [(2, 1), (1, 2), (4, 2)])
def test_resume_on_another_number_of_processes(runs, saved, now):
    check_resume(runs, saved, now)
    # The main process's streams are seeder's re-derived ones (2 -> 1: not rank 0's saved
    # random_states_0.pkl).
    probes = [
        torch.load(runs / f"probe{saved}to{now}_{r}.pt", weights_only=True) for r in range(now)
    ]
    for r in range(now):
        assert torch.equal(probes[r], expected_probe(runs, saved, r, now)), r


@pytest.mark.slow
@pytest.mark.parametrize("saved, now", [(2, 1), (1, 2)])
def test_default_mode_checkpoint_is_refused(runs, saved, now):
    for r in range(now):
        refused = (runs / f"refused{saved}to{now}_{r}.txt").read_text()
        assert "nothing was changed" in refused and "elastic" in refused, refused
