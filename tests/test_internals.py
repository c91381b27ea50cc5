"""Each private name of another library that seeder uses is loud when it changes
(seeder/_internals.py).

Every test takes a real object or class of the library, deletes or replaces the private
name seeder relies on (as a new version of the library would), and watches seeder raise
DependencyChanged or warn with SeederWarning naming the library and its version.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data
from optional import need

import seeder
from seeder import SeederWarning
from seeder import _internals as internals
from seeder._internals import INTERNALS, DependencyChanged


@pytest.fixture
def unchecked(monkeypatch):
    """Forget which checks already passed and which warnings were given, for this test only."""
    monkeypatch.setattr(internals, "_ok", set())
    monkeypatch.setattr(internals, "_warned", set())


def loud(match):
    return pytest.raises(DependencyChanged, match=match)


def test_every_entry_names_versions_and_passes_on_this_machine(unchecked):
    assert len(INTERNALS) >= 10
    for key, item in INTERNALS.items():
        assert item.checked and item.used_for and item.if_changed, key
        package = key.split(":")[0]
        installed = package in ("torch", "numpy") or importlib.util.find_spec(package)
        if not item.per_object and installed:  # an optional package's entries where it is there
            assert internals.require(key) is True, key


def test_torch_dataloader_without_get_iterator_raises(unchecked, monkeypatch):
    monkeypatch.delattr(torch.utils.data.DataLoader, "_get_iterator")
    with loud(r"torch .* changed: DataLoader.__iter__ no longer calls DataLoader._get_iterator"):
        seeder.DataLoader(range(4), seeder=seeder.Seeder())


def test_torch_iterators_not_reading_dataset_raise(unchecked, monkeypatch):
    base = torch.utils.data.dataloader._BaseDataLoaderIter
    monkeypatch.setattr(
        base, "__init__", lambda self, loader: None
    )  # an iterator that reads nothing of the loader
    with loud("no longer read loader.dataset"):
        seeder.DataLoader(range(4), seeder=seeder.Seeder())


def test_numpy_global_that_is_not_the_global_raises(unchecked, monkeypatch):
    from seeder._seeding.rngs import NumpyRandomStateAdapter

    other = np.random.RandomState()
    other.set_state(np.random.get_state())
    other.random_sample()  # a RandomState one draw ahead of the global one: never the same state
    monkeypatch.setattr(np.random.mtrand, "_rand", other)
    with loud(r"numpy .* changed: numpy.random.mtrand._rand is not the RandomState behind"):
        NumpyRandomStateAdapter()


def test_torch_without_privateuse1_name_warns_and_seeds_the_rest(unchecked, monkeypatch):
    from seeder._seeding import rngs_torch

    monkeypatch.delattr(torch._C, "_get_privateuse1_backend_name")
    monkeypatch.setattr(rngs_torch, "_ACCELERATORS", None)
    with pytest.warns(
        SeederWarning,
        match=r"torch 2\.\S+ changed: .*custom \(privateuse1\) accelerator backends are not",
    ):
        assert isinstance(rngs_torch.accelerator_types(), list)


def test_accelerate_mixin_no_longer_reading_drop_last_raises(unchecked, monkeypatch):
    DataLoaderStateMixin = need("accelerate.data_loader", "SeederAccelerator").DataLoaderStateMixin
    from seeder.integrations.accelerate import PreparedLoader

    def begin(self):  # a begin() that reads the public name instead
        self.reset()
        self.gradient_state._add_dataloader(self)

    monkeypatch.setattr(DataLoaderStateMixin, "begin", begin)
    with loud(r"accelerate .* changed: DataLoaderStateMixin no longer reads _drop_last"):
        PreparedLoader(seeder.DataLoader(range(4), seeder=seeder.Seeder()))


def test_transformers_without_skip_first_batches_raises(unchecked, monkeypatch):
    need("transformers.trainer", "SeederTrainer")
    import transformers.trainer

    monkeypatch.delattr(transformers.trainer, "skip_first_batches")
    with loud(r"transformers .* changed: transformers.trainer has no skip_first_batches"):
        internals.require("transformers:trainer.skip_first_batches")


def test_lightning_checkpoint_without_loop_state_raises(unchecked):
    need("lightning", "SeederCallback")
    checkpoint = {"loops": {"fit_loop": {"state_dict": {"combined_loader": []}}}}
    internals.require("lightning:checkpoint loops.fit_loop.state_dict.combined_loader", checkpoint)
    del checkpoint["loops"]["fit_loop"]["state_dict"]
    with loud(r"lightning .* changed: the checkpoint has no list at"):
        internals.require(
            "lightning:checkpoint loops.fit_loop.state_dict.combined_loader", checkpoint
        )


def test_dali_pipeline_and_iterator_without_private_names_are_loud(unchecked):
    need("nvidia.dali", "DALI tracking")  # with SEEDER_REQUIRE_DALI=1 a missing DALI fails
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    import seeder.data.dali as ds
    import seeder.data.dali as sd

    @pipeline_def(batch_size=2, num_threads=1, device_id=None, enable_checkpointing=True)
    def noise():
        return fn.random.uniform(range=(0, 1))

    s = seeder.Seeder()
    s.init(1)
    pipe = noise(seed=ds.pipeline_seed(0, seeder=s))
    pipe.build()
    it = DALIGenericIterator(pipe, ["x"], size=4)
    del it._pipes
    with loud(r"nvidia-dali .* changed: DALIGenericIterator has no attribute _pipes"):
        sd.track(pipe, 0, iterator=it, seeder=s)
    del pipe._enable_checkpointing
    with loud(r"nvidia-dali .* changed: Pipeline has no attribute _enable_checkpointing"):
        sd.track(pipe, 0, seeder=s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        del it


def test_torch_cpu_state_layout_changed_warns_and_takes_torchs_own_check(unchecked, monkeypatch):
    import dataclasses

    key = "torch:CPUGeneratorImplState"
    moved = dataclasses.replace(
        INTERNALS[key], check=lambda _: "normal_is_valid is no longer at byte 5040"
    )
    monkeypatch.setitem(INTERNALS, key, moved)
    s = seeder.Seeder()
    s.init(3)
    state = s.state_dict()
    with pytest.warns(
        SeederWarning,
        match=r"torch 2\.\S+ changed: normal_is_valid .*torch's own set_state check only",
    ):
        s.load_state_dict(state)
    bad = {**state, "rngs": {**state["rngs"], "torch": state["rngs"]["torch"].clone()}}
    bad["rngs"]["torch"][12:16] = 0  # 'seeded' 0: torch's own check still refuses it
    with pytest.raises(seeder.StateError, match="torch refuses this generator state"):
        s.load_state_dict(bad)
