"""One loader interface (``seeder.data._seederloader.SeederLoader``): each of seeder's loaders
answers it, the integrations use it without asking the class, and each loader takes torch's
arguments as torch does."""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import pytest
import torch

import seeder
from seeder.data._seederloader import SeederLoader
from seeder.data._torchargs import TorchArgs

sys.path.insert(0, str(Path(__file__).parent))
from optional import need  # noqa: E402

N, BS = 10, 2  # 5 batches an epoch
KINDS = ("map", "elastic", "stream")
LOADERS = {
    "map": seeder.DataLoader,
    "elastic": seeder.ElasticDataLoader,
    "stream": seeder.IterableDataLoader,
}


class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i), float(torch.rand(()))])


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return (torch.tensor([float(i), float(torch.rand(()))]) for i in range(N))


def build(kind, s, **kw):
    dataset = Stream() if kind == "stream" else Rows()
    shuffle = {} if kind == "stream" else {"shuffle": True}
    return LOADERS[kind](dataset, batch_size=BS, seeder=s, **shuffle, **kw)


@pytest.fixture
def s():
    s = seeder.Seeder()
    s.init(11)
    s.reseed(1, 0)
    return s


# ------------------------------------------------------------------------------ the interface
@pytest.mark.parametrize("kind", KINDS)
def test_each_loader_answers_the_interface(kind, s):
    loader = build(kind, s)
    assert isinstance(loader, SeederLoader) and isinstance(loader, torch.utils.data.DataLoader)
    assert (loader.epoch, loader.batches_done, loader.rank, loader.world_size) == (0, 0, 0, 1)
    assert loader.global_batch_size == BS
    assert loader.num_batches == (None if kind == "stream" else N // BS)
    assert loader.seeder_elastic is (kind == "elastic")
    it = iter(loader)
    first = next(it)
    second = next(it)
    assert loader.batches_done == 2
    # the state after one batch, asked after two: what a loader that fetched ahead trained
    at_one = loader.state_dict_at(1)
    assert loader.state_dict_at(2) == loader.state_dict()
    again = build(kind, s)
    again.load_state_dict(at_one)
    assert again.batches_done == 1 and torch.equal(next(iter(again)), second)
    if kind == "stream":  # it cannot answer: it says why, through the same methods
        with pytest.raises(NotImplementedError, match="known only by reading the stream"):
            loader.indices_at(0, 0)
        with pytest.raises(NotImplementedError, match="known only by reading the stream"):
            loader.skip(0, 3)
        assert loader.skipped(0) == []
    else:
        assert loader.indices_at(0, 0) == first[:, 0].long().tolist()
        assert loader.global_indices_at(0, 1) == [second[:, 0].long().tolist()]
        loader.skip(0, 4)
        assert loader.skipped(0) == [4]
    loader.set_epoch(3)
    assert loader.epoch == 3 and loader.batches_done == 0


def test_a_class_missing_part_of_the_interface_cannot_be_built(s):
    class Partial(SeederLoader):
        epoch = 0

    with pytest.raises(TypeError, match="abstract"):
        Partial(range(4))


@pytest.mark.parametrize("kind", ("map", "elastic"))
def test_state_dict_at_refuses_a_position_outside_the_epoch(kind, s):
    with pytest.raises(ValueError, match=r"batches_done must be in \[0, 5\], got 6"):
        build(kind, s).state_dict_at(6)


# ---------------------------------------------------------------------------- the integrations
class Fit:
    """A tiny LightningModule training on the loader it is given."""

    @staticmethod
    def module(loader):
        import lightning.pytorch as pl

        class Net(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(2, 1)

            def training_step(self, batch, batch_idx):
                return self.lin(batch).pow(2).mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

            def train_dataloader(self):
                return loader

        return Net()


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("kind", KINDS)
def test_the_integrations_take_any_loader_through_the_interface(kind, s):
    """accelerate's prepared loader, Lightning's callback and the transformers Trainer's loader
    read each loader through the interface: the global batch, the epoch, the last batch, the
    position (a stream's as of the batches trained)."""
    need("accelerate")
    from seeder.integrations.accelerate import SeederAccelerator

    loader = build(kind, s)
    accelerator = SeederAccelerator(cpu=True, seeder=s)
    prepared = accelerator.prepare(loader)
    assert prepared.loader is loader and prepared.total_batch_size == BS
    prepared.set_epoch(2)
    assert loader.epoch == 2
    last = [prepared.end_of_dataloader for _ in prepared]
    assert last == [False] * (N // BS - 1) + [True]
    assert accelerator.skip_first_batches(prepared, loader.batches_done) is prepared

    need("transformers")
    from seeder.integrations.transformers import _TrainLoader

    # the Trainer counts a loader without length as one long epoch: only a stream is tracked so
    assert (_TrainLoader(build(kind, s), s).stream is None) is (kind != "stream")

    need("lightning")
    import lightning.pytorch as pl

    from seeder.integrations.lightning import SeederCallback

    s.reseed(1, 0)
    loader = build(kind, s)
    callback = SeederCallback(s)
    trainer = pl.Trainer(
        max_steps=3,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator="cpu",
    )
    trainer.fit(Fit.module(loader))
    state = callback.state_dict()
    want = {
        "map": [0, 3, N // BS],
        "elastic": [0, 3 * BS, "global"],  # samples of the global order: any world size
        "stream": [0, 3, None],  # as of the batches trained, not those fetched ahead
    }[kind]
    assert state["loaders"] == [want] and state["epoch_complete"] is False


# ---------------------------------------------------------------------------- torch's arguments
TORCH = inspect.signature(torch.utils.data.DataLoader.__init__)


def test_the_one_definition_is_torchs_signature():
    torch_params = list(TORCH.parameters.values())[2:]  # after self, dataset
    fields = [f for f in dataclasses.fields(TorchArgs) if f.name != "given"]
    assert [f.name for f in fields] == [p.name for p in torch_params]
    assert [f.default for f in fields] == [p.default for p in torch_params]


@pytest.mark.parametrize("kind", KINDS)
def test_each_signature_is_torchs_then_the_loaders_own_keywords(kind):
    ours = list(inspect.signature(LOADERS[kind]).parameters.values())
    theirs = list(TORCH.parameters.values())[1:]  # after self
    assert [(p.name, p.kind, p.default) for p in ours[: len(theirs)]] == [
        (p.name, p.kind, p.default) for p in theirs
    ]
    assert all(p.kind is p.KEYWORD_ONLY for p in ours[len(theirs) :])
    assert "seeder" in [p.name for p in ours[len(theirs) :]]


@pytest.mark.parametrize("kind", KINDS)
def test_each_loader_binds_torchs_arguments_as_torch_does(kind, s):
    dataset = Stream() if kind == "stream" else Rows()
    # batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory, drop_last
    positional = (3, None, None, None, 0, None, False, True)
    loader = LOADERS[kind](dataset, *positional, seeder=s, timeout=0, prefetch_factor=None)
    plain = torch.utils.data.DataLoader(Rows(), *positional, timeout=0, prefetch_factor=None)
    assert (loader.batch_size, loader.drop_last) == (plain.batch_size, plain.drop_last) == (3, True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_szie'"):
        LOADERS[kind](dataset, batch_szie=3, seeder=s)
    with pytest.raises(TypeError, match="multiple values for argument 'batch_size'"):
        LOADERS[kind](dataset, 3, batch_size=3, seeder=s)
    with pytest.raises(TypeError, match="at most 13 positional arguments"):
        LOADERS[kind](dataset, *([None] * 13), seeder=s)
    with pytest.raises(TypeError, match="timeout must be|num_workers must be an int"):
        LOADERS[kind](dataset, num_workers="2", seeder=s)
