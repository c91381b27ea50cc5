"""A plain ``accelerate.Accelerator`` preparing a seeder loader keeps it as it is: the same batches
as SeederAccelerator, on 1 and 2 processes with 2 workers, and a mid-epoch resume through
``accelerator.save_state`` with the seeder state beside it, or through ``seeder.state_dict()``.

One set of runs serves the slow tests (a module fixture): the one-process runs in this process, the
two-process ones under torchrun (gloo on 127.0.0.1).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("accelerate")

from helpers import REPO_ROOT, torchrun  # noqa: E402

import seeder  # noqa: E402

pytestmark = pytest.mark.xdist_group("accelerate_plain")  # one worker builds the module's runs

SCRIPT = "tests/scripts/accelerate_plain.py"
_spec = importlib.util.spec_from_file_location("accelerate_plain", REPO_ROOT / SCRIPT)
child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(child)  # type: ignore[union-attr]
TOKENS = ["plain", "seeder", "folder", "own"]


def _loaders(s):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(torch.arange(12.0))

    data = torch.arange(20.0)
    return {
        "DataLoader": seeder.DataLoader(data, batch_size=4, shuffle=True, seeder=s),
        "ElasticDataLoader": seeder.ElasticDataLoader(data, batch_size=4, shuffle=True, seeder=s),
        "IterableDataLoader": seeder.IterableDataLoader(Stream(), batch_size=4, seeder=s),
    }


@pytest.mark.parametrize("kind", ["DataLoader", "ElasticDataLoader", "IterableDataLoader"])
def test_a_plain_accelerator_keeps_a_seeder_loader_as_it_is(kind):
    from accelerate import Accelerator

    batches = []
    for prepare in (False, True):
        s = seeder.Seeder()
        s.init(42)
        s.reseed(1, 0)
        loader = _loaders(s)[kind]
        if prepare:
            assert Accelerator(cpu=True).prepare(loader) is loader
        it = iter(loader)
        first = next(it)
        assert loader.state_dict() is not None  # the position counts the batch handed out
        batches.append([first] + list(it))
    assert [b.tolist() for b in batches[0]] == [b.tolist() for b in batches[1]]


def test_a_plain_accelerators_skip_first_batches_says_to_iterate_the_loader():
    """accelerate's skip_first_batches rebuilds a DataLoader around the batch sampler: its first
    batch raises, naming the fix; the loader itself is unharmed."""
    from accelerate import Accelerator

    s = seeder.Seeder()
    s.init(42)
    s.reseed(1, 0)
    acc = Accelerator(cpu=True)
    loader = acc.prepare(seeder.DataLoader(torch.arange(20.0), batch_size=4, seeder=s))
    with pytest.raises(RuntimeError, match="rebuilt.*SeederAccelerator.*load_checkpoint_state"):
        next(iter(acc.skip_first_batches(loader, 1)))
    assert loader.batches_done == 0 and [len(b) for b in loader] == [4] * 5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("accelerate_plain")
    with seeder.Seeder().fork_rng():
        child.main(str(out), TOKENS)
    torchrun([SCRIPT, str(out), *TOKENS], nproc=2, frameworks=True)
    return out


def _rows(out, token, world):
    return [torch.load(out / f"{token}{world}_{r}.pt", weights_only=True) for r in range(world)]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x[:2] == y[:2] and torch.equal(x[2], y[2]), (x[:3], y[:3])
        assert torch.equal(x[3], y[3]) and torch.equal(x[4], y[4]), x[:2]


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_a_plain_accelerator_trains_as_seeder_accelerator_does(runs, world):
    plain, ref = _rows(runs, "plain", world), _rows(runs, "seeder", world)
    for rank in range(world):
        _same(plain[rank], ref[rank])
    steps = child.N // child.GLOBAL_BATCH
    assert [len(r) for r in plain] == [child.EPOCHS * steps] * world
    seen = sorted(i for r in plain for row in r[:steps] for i in row[2].tolist())
    assert seen == list(range(child.N))  # each rank its own shard: every sample once an epoch


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("how", ["folder", "own"])
def test_a_plain_accelerator_resumes_inside_an_epoch_exactly(runs, world, how):
    full, resumed = _rows(runs, "plain", world), _rows(runs, how, world)
    for rank in range(world):
        assert resumed[rank][0][:2] == (0, child.STOP + 1)
        _same(resumed[rank], full[rank][child.STOP + 1 :])


def test_an_accelerate_that_no_longer_keeps_prepared_loaders_is_named(monkeypatch):
    """Were accelerate to rebuild a loader marked prepared, the rebuilt loader's first batch names
    the change of accelerate instead of pointing at the script."""
    import accelerate.data_loader
    from accelerate import Accelerator

    from seeder import _internals as internals

    monkeypatch.setattr(internals, "_ok", set())

    def rebuilding(self, data_loader, device_placement=None, slice_fn_for_dispatch=None):
        """An Accelerator.prepare_data_loader that rebuilds every loader, marked or not."""
        return accelerate.data_loader.prepare_data_loader(data_loader, self.device)

    monkeypatch.setattr(Accelerator, "prepare_data_loader", rebuilding)
    s = seeder.Seeder()
    s.init(42)
    s.reseed(1, 0)
    rebuilt = Accelerator(cpu=True).prepare(
        seeder.DataLoader(torch.arange(8.0), batch_size=4, seeder=s)
    )
    with pytest.raises(internals.DependencyChanged, match="no longer reads _is_accelerate_prep"):
        next(iter(rebuilt))


@pytest.mark.parametrize("kind", ["DataLoader", "ElasticDataLoader", "IterableDataLoader"])
def test_a_plain_accelerators_own_save_state_keeps_the_loaders_position(kind, tmp_path):
    """accelerate saves and loads the state of a loader that says it is stateful: its files alone
    continue the epoch from the batch after the save, not from the epoch's start."""
    from accelerate import Accelerator

    def prepared():
        s = seeder.Seeder()
        s.init(42)
        s.reseed(1, 0)
        acc = Accelerator(cpu=True)
        return acc, acc.prepare(_loaders(s)[kind])

    _, loader = prepared()
    whole = [b.tolist() for b in loader]
    acc, loader = prepared()
    it = iter(loader)
    got = [next(it).tolist(), next(it).tolist()]
    acc.save_state(str(tmp_path))
    acc, loader = prepared()
    acc.load_state(str(tmp_path))
    assert loader.batches_done == 2
    assert got + [b.tolist() for b in loader] == whole
