"""SeederTrainer(elastic=True): a checkpoint saved inside an epoch by 2 processes resumes on 1, and
1 on 2.

Uninterrupted runs on 1 process (in this process) and 2 (torchrun, gloo on 127.0.0.1) train two
epochs with a global batch of 8 and save a Trainer checkpoint at global step 2 of epoch 0; the
2-process run then resumes the 1-process checkpoint (1 -> 2) and this process the 2-process one
(2 -> 1, batch 8 per device: the same global batch, with one loader worker where the runs had none).
Both runs give every sample the same tensor. Every sample of the two epochs is trained once and each
fetched tensor (augmentation from random, NumPy and torch) is bit for bit the uninterrupted run's;
at the first resumed step the global RNGs are seeder's re-derived streams, not the Trainer's
``rng_state.pth``. On the same number of processes (1 -> 1) the resume is bit for bit: data, losses
(dropout included) and trained weights.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections import Counter

import pytest
import torch

pytest.importorskip("transformers")

from helpers import REPO_ROOT, torchrun, trained_samples  # noqa: E402

import seeder  # noqa: E402
from seeder._state.world import rederive_streams  # noqa: E402

pytestmark = pytest.mark.xdist_group("transformers_elastic")  # one worker builds the module's runs

SCRIPT = "tests/scripts/hf_elastic.py"
_spec = importlib.util.spec_from_file_location("hf_elastic", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]
STEPS_PER_EPOCH = child.STEPS_PER_EPOCH


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The folder of the runs: full1 (1 process, the reference), full2, resume1to2, resume2to1."""
    tmp_path = tmp_path_factory.mktemp("transformers_elastic")
    out = str(tmp_path)
    with seeder.Seeder().fork_rng():
        child.full(out)  # 1 process, saves full1/checkpoint-STOP
    torchrun(
        [SCRIPT, out, "full", "resume1"], nproc=2, timeout=240, frameworks=True
    )  # 2 processes; then 1 -> 2
    folder = tmp_path / "full2" / f"checkpoint-{child.STOP}"
    # The Trainer's own file of a 1-process run: _load_rng_state loads it, the seeder's re-derived
    # streams must win.
    shutil.copy(folder / "rng_state_0.pth", folder / "rng_state.pth")
    with seeder.Seeder().fork_rng():
        child.resume(out, 2, workers=1)  # 2 -> 1, and 0 -> 1 loader worker
    return tmp_path


@pytest.mark.slow
def test_trainer_checkpoint_resumes_on_another_number_of_processes(runs):
    tmp_path = runs
    folder = tmp_path / "full2" / f"checkpoint-{child.STOP}"

    every = Counter({(e, i): 1 for e in range(child.EPOCHS) for i in range(child.N)})
    ref, count = trained_samples([tmp_path / "full1_0.pt"])
    assert count == every
    assert len({ref[(0, i)].sum().item() for i in range(child.N)}) == child.N
    other, count = trained_samples([tmp_path / f"full2_{r}.pt" for r in range(2)])
    assert count == every and all(
        torch.equal(other[k], ref[k]) for k in every
    )  # the same data on 1 and 2
    for saved, now in ((2, 1), (1, 2)):
        _, trained = trained_samples(
            [tmp_path / f"full{saved}_{r}.pt" for r in range(saved)],
            keep=lambda epoch, step: step <= child.STOP,
        )
        assert sum(trained.values()) == child.STOP * child.GLOBAL_BATCH
        paths = [tmp_path / f"resume{saved}to{now}_{r}.pt" for r in range(now)]
        resumed, count = trained_samples(paths)
        assert (
            min(step for p in paths for _, step, *_ in torch.load(p, weights_only=True))
            == child.STOP + 1
        )
        assert trained + count == every, (
            saved,
            now,
        )  # every sample of the two epochs once: none lost, none repeated
        assert all(torch.equal(resumed[k], ref[k]) for k in count), (saved, now)

    state = torch.load(folder / "seeder_state_0.pt", weights_only=True)
    with seeder.Seeder().fork_rng():
        s = seeder.Seeder()
        s.init(child.SEED)
        loader = seeder.ElasticDataLoader(
            child.Indexed(), batch_size=child.GLOBAL_BATCH, shuffle=True, seeder=s
        )
        s.load_state_dict(state)
        expected = child.rng_states()
    assert loader.state_dict()["position"] == child.STOP * child.GLOBAL_BATCH
    got = torch.load(tmp_path / "rngs2to1_0.pt", weights_only=True)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    saved_cpu = torch.load(folder / "rng_state.pth", weights_only=False)[
        "cpu"
    ]  # the Trainer's own file (NumPy state)
    assert not torch.equal(
        saved_cpu, expected[2]
    )  # the Trainer's file holds other streams: the check can fail

    # 1 -> 2: each rank's global RNGs at the first resumed step are its own re-derived streams.
    entry = torch.load(
        tmp_path / "full1" / f"checkpoint-{child.STOP}" / "seeder_state_0.pt", weights_only=True
    )
    for r in range(2):
        with seeder.Seeder().fork_rng():
            s = seeder.Seeder()
            s.init(child.SEED, ngpus=2, rank=r)
            rederive_streams(entry, s, child.STOP)
            expected = child.rng_states()
        got = torch.load(tmp_path / f"rngs1to2_{r}.pt", weights_only=True)
        assert all(torch.equal(a, b) for a, b in zip(got, expected)), r


@pytest.mark.slow
def test_same_world_resume_is_bitwise(runs):
    with (
        seeder.Seeder().fork_rng()
    ):  # the uninterrupted 1-process run's checkpoint, resumed on 1 process
        rest, _, resumed_digest = child.run(str(runs / "full1"), resume=True)
    whole = torch.load(runs / "full1_0.pt", weights_only=True)
    digest = (runs / "digest1_0.txt").read_text()
    first = [r for r in whole if r[1] <= child.STOP]
    assert [r[1] for r in first] == list(range(1, child.STOP + 1))
    assert [r[1] for r in rest] == list(range(child.STOP + 1, child.EPOCHS * STEPS_PER_EPOCH + 1))
    assert len(first + rest) == len(whole)
    for a, b in zip(first + rest, whole):
        assert a[:2] == b[:2] and all(torch.equal(x, y) for x, y in zip(a[2:], b[2:])), a[:2]
    assert resumed_digest == digest


def test_elastic_argument_is_checked(tmp_path):
    from transformers import TrainingArguments

    from seeder.integrations.transformers import SeederTrainer

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([])

    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    with pytest.raises(TypeError, match="elastic must be True or False"):
        SeederTrainer(
            model=child.Tiny(),
            args=args,
            train_dataset=child.Indexed(),
            seeder=seeder.Seeder(),
            elastic=1,
        )
    with pytest.raises(TypeError, match="map-style train_dataset"):
        args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=1)
        SeederTrainer(
            model=child.Tiny(),
            args=args,
            train_dataset=Stream(),
            seeder=seeder.Seeder(),
            elastic=True,
        )


@pytest.mark.parametrize("elastic", [True, False])
def test_the_trainer_builds_the_loader_class_it_names(tmp_path, elastic):
    """SeederTrainer(elastic=True) trains from a seeder.ElasticDataLoader, elastic=False from a
    seeder.DataLoader."""
    from transformers import TrainingArguments

    from seeder.integrations.transformers import SeederTrainer

    s = seeder.Seeder()
    s.init(3)
    args = TrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True, per_device_train_batch_size=2
    )
    trainer = SeederTrainer(
        model=child.Tiny(), args=args, train_dataset=child.Indexed(), seeder=s, elastic=elastic
    )
    want = seeder.ElasticDataLoader if elastic else seeder.DataLoader
    assert type(trainer.get_train_dataloader().loader) is want
