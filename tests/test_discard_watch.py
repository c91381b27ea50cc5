"""A resumed epoch is trained, or seeder says it was not: the discard watch of seeder's map-style
and elastic loaders.

A run trains 5 of an epoch's 12 batches and saves; a second run loads the state and trains the rest
with one of several loops: the skip idiom (warns: it drops batches 5..9), gradient accumulation over
4 batches, a plain loop, ``enumerate(loader, start=loader.batches_done)``, a loop fetching one batch
ahead as Lightning's does (none warn).
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from torch.nn.modules import module as torch_module

import seeder
from seeder import SeederWarning

N, SAVED = 12, 5
KINDS = {"map": seeder.DataLoader, "elastic": seeder.ElasticDataLoader}


class Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((2,), float(i)) + torch.rand(2)


class ModuleTransformed(Data):
    """Items made by an ``nn.Module`` (as torchvision's transforms are): a forward pass inside every
    fetch."""

    def __init__(self):
        self.transform = torch.nn.Identity()

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(super().__getitem__(i))


def resumed(kind: str, saved: int = SAVED, dataset=None, workers: int = 0):
    """A loader resumed at batch ``saved`` of epoch 0, its model and optimizer, and the saved
    state."""
    dataset = dataset if dataset is not None else Data()
    first = seeder.Seeder()
    first.init(3)
    first.reseed(1, 0)
    loader = KINDS[kind](dataset, batch_size=1, shuffle=True, seeder=first)
    it = iter(loader)
    for _ in range(saved):
        next(it)
    state = {"epoch_step": saved, "seeder": first.state_dict()}
    del it
    again = seeder.Seeder()
    again.init(3)
    loader = KINDS[kind](dataset, batch_size=1, shuffle=True, seeder=again, num_workers=workers)
    model = torch.nn.Linear(
        2, 1
    )  # built before the load: nothing draws between the load and the first batch
    again.load_state_dict(state["seeder"])
    again.reseed(1, 0)
    return loader, model, torch.optim.SGD(model.parameters(), lr=0.01), state


def train_step(model, opt, batch, step: bool = True) -> None:
    model(batch).sum().backward()
    if step:
        opt.step()
        opt.zero_grad()


def discarded(caught) -> list:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, SeederWarning) and "discarded" in str(w.message)
    ]


_HOOKS_BEFORE = [0]


@pytest.fixture(autouse=True)
def _hooks_before():
    """The global forward pre-hooks present before the test: earlier tests' watches whose
    iterators a kept traceback holds (``pytest.raises``) are not this test's."""
    gc.collect()  # what nothing holds goes before the count
    _HOOKS_BEFORE[0] = len(torch_module._global_forward_pre_hooks)


def hooks_left() -> int:
    """The global forward pre-hooks this test's watches left."""
    return len(torch_module._global_forward_pre_hooks) - _HOOKS_BEFORE[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("dataset", [Data, ModuleTransformed], ids=["plain", "module-transform"])
def test_the_skip_idiom_on_a_resumed_loader_warns_that_batches_were_discarded(kind, dataset):
    """``if i < state["epoch_step"]: continue`` drops the first 5 of the 7 batches left: a
    SeederWarning says so, naming batches_done; a forward pass inside the loader's own fetch does
    not count as the loop using a batch."""
    loader, model, opt, state = resumed(kind, dataset=dataset())
    trained = 0
    with pytest.warns(SeederWarning, match="discarded") as caught:
        for i, batch in enumerate(loader):
            if i < state["epoch_step"]:
                continue
            train_step(model, opt, batch)
            trained += 1
    assert trained == N - 2 * SAVED
    message = discarded(caught)[0]
    assert "batches_done" in message and "first 5 batches" in message and "batches 5..9" in message
    assert hooks_left() == 0


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("then", ["validation", "next-epoch"])
def test_the_skip_idiom_that_discards_the_rest_of_the_epoch_warns_at_the_next_forward_pass(
    kind, then
):
    """Resumed at batch 8 of 12, the skip idiom drops all 4 batches left: the epoch ends with none
    used, and the first forward pass after it (a validation, or the next epoch's first batch)
    warns."""
    loader, model, opt, _ = resumed(kind, saved=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        for i, batch in enumerate(loader):
            if i < 8:
                continue
            train_step(model, opt, batch)
    with pytest.warns(SeederWarning, match="discarded the first 4 batches") as caught:
        if then == "validation":
            with torch.no_grad():
                model(torch.ones(2))
        else:
            loader.seeder.reseed(1, 1)
            for batch in loader:
                train_step(model, opt, batch)
    assert "batches 8..11" in discarded(caught)[0]
    assert hooks_left() == 0


def test_a_loop_without_a_model_over_a_resumed_epoch_does_not_warn():
    """A look at the data (no forward pass, no step) drops every batch it is handed: no warning, and
    the watch's hooks go with the loader."""
    loader, _, _, _ = resumed("map", saved=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        assert len([batch for batch in loader]) == N - 8
        del loader
        torch.nn.Linear(2, 1)(torch.ones(2))
    assert hooks_left() == 0


def test_the_skip_idiom_with_workers_warns():
    loader, model, opt, state = resumed("elastic", workers=2)
    with pytest.warns(SeederWarning, match="discarded"):
        for i, batch in enumerate(loader):
            if i >= state["epoch_step"]:
                train_step(model, opt, batch)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "loop", ["plain", "accumulate-4", "batches_done", "one-ahead", "step-only"]
)
def test_loops_that_train_every_batch_do_not_warn(kind, loop):
    """A plain loop, gradient accumulation over 4 batches (a forward pass on each, a step every 4),
    numbering from loader.batches_done, a loop fetching one batch ahead (Lightning's fetcher), and a
    loop whose model is no nn.Module (an optimizer step on every batch) train the 7 batches left,
    warning nothing."""
    loader, model, opt, _ = resumed(kind)
    weight = torch.zeros(2, requires_grad=True)
    bare = torch.optim.SGD([weight], lr=0.01)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        if loop == "plain":
            for batch in loader:
                train_step(model, opt, batch)
                seen.append(batch)
        elif loop == "accumulate-4":
            for i, batch in enumerate(loader, start=loader.batches_done):
                train_step(model, opt, batch, step=(i + 1) % 4 == 0)
                seen.append(batch)
        elif loop == "batches_done":
            numbers = []
            for i, batch in enumerate(loader, start=loader.batches_done):
                numbers.append(i)
                train_step(model, opt, batch)
                seen.append(batch)
            assert numbers == list(range(SAVED, N))
        elif loop == "one-ahead":
            it = iter(loader)
            ahead = next(it, None)
            while ahead is not None:
                batch, ahead = ahead, next(it, None)
                train_step(model, opt, batch)
                seen.append(batch)
        else:
            for batch in loader:
                (weight * batch).sum().backward()
                bare.step()
                seen.append(batch)
    assert len(seen) == N - SAVED
    assert hooks_left() == 0


def test_a_fresh_epoch_and_a_resume_at_batch_one_are_not_watched():
    """Only a resume at batch 2 or later is watched: a fresh epoch registers no hook, and neither
    does a resume at batch 1 (one batch discarded looks like a loop fetching one batch ahead)."""
    loader, model, opt, _ = resumed("map", saved=1)
    it = iter(loader)
    assert hooks_left() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        for _ in it:
            pass
    loader, _, _, _ = resumed("map", saved=2)
    it = iter(loader)
    assert hooks_left() == 1
    del it  # a loop left before the watch decided leaves no hook behind
    assert hooks_left() == 0


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        for i in range(N):
            yield torch.full((2,), float(i)) + torch.rand(2)


def resumed_stream(saved: int = SAVED):
    """An ``IterableDataLoader`` resumed at batch ``saved`` of epoch 0, a model, an optimizer."""
    first = seeder.Seeder()
    first.init(3)
    first.reseed(1, 0)
    loader = seeder.IterableDataLoader(Stream(), batch_size=1, seeder=first)
    it = iter(loader)
    for _ in range(saved):
        next(it)
    state = {"epoch_step": saved, "seeder": first.state_dict()}
    del it
    again = seeder.Seeder()
    again.init(3)
    loader = seeder.IterableDataLoader(Stream(), batch_size=1, seeder=again)
    model = torch.nn.Linear(2, 1)
    again.load_state_dict(state["seeder"])
    again.reseed(1, 0)
    return loader, model, torch.optim.SGD(model.parameters(), lr=0.01), state


def resumed_any(kind: str, saved: int = SAVED):
    return resumed_stream(saved) if kind == "iterable" else resumed(kind, saved)


class Jitter(torch.nn.Module):
    """An augmentation that is an ``nn.Module`` without parameters (as torchvision's v2 transforms
    are)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.01


@pytest.mark.parametrize("kind", [*sorted(KINDS), "iterable"])
@pytest.mark.parametrize("augment", [False, True], ids=["plain", "augmented-before-skip"])
def test_the_skip_idiom_warns_with_an_augmentation_module_before_the_skip(kind, augment):
    """An ``nn.Module`` augmentation applied to every batch before ``if i < start: continue``
    trains nothing: the idiom still warns, over every seeder loader that resumes inside an epoch
    (``IterableDataLoader`` included)."""
    loader, model, opt, state = resumed_any(kind)
    jitter = Jitter()
    trained = 0
    with pytest.warns(SeederWarning, match="discarded") as caught:
        for i, batch in enumerate(loader):
            if augment:
                batch = jitter(batch)
            if i < state["epoch_step"]:
                continue
            train_step(model, opt, batch)
            trained += 1
    assert trained == N - 2 * SAVED
    assert "first 5 batches" in discarded(caught)[0]
    assert hooks_left() == 0 and not hasattr(torch.autograd.backward, "__wrapped__")


@pytest.mark.parametrize("kind", [*sorted(KINDS), "iterable"])
@pytest.mark.parametrize("evaluate", ["sixth-batch", "after"])
def test_a_functional_model_stepped_by_hand_then_evaluated_does_not_warn(kind, evaluate):
    """A model that is no ``nn.Module``, stepped by hand (no optimizer), trains every batch: its
    backward passes say so, and an ``nn.Module`` evaluation, after the sixth batch of the 7 left
    or after the 4 left of the epoch (then in the next epoch), warns nothing."""
    saved = SAVED if evaluate == "sixth-batch" else 8
    loader, evaluator, _, _ = resumed_any(kind, saved)
    weight = torch.zeros(2, requires_grad=True)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        for i, batch in enumerate(loader, start=loader.batches_done):
            (weight * batch).sum().backward()
            with torch.no_grad():
                weight -= 0.01 * weight.grad
                weight.grad = None
            seen += 1
            if evaluate == "sixth-batch" and i == saved + 5:
                with torch.no_grad():
                    evaluator.eval()(batch)
        with torch.no_grad():
            evaluator.eval()(torch.ones(2))
        if kind != "iterable":
            loader.seeder.reseed(1, 1)
            for batch in loader:
                evaluator(batch)
    assert seen == N - saved
    assert hooks_left() == 0 and not hasattr(torch.autograd.backward, "__wrapped__")


def test_a_functional_model_through_autograd_grad_is_training():
    """``torch.autograd.grad`` (what ``torch.func.grad`` calls) counts as a backward pass too."""
    loader, evaluator, _, _ = resumed("map", saved=8)
    weight = torch.zeros(2, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SeederWarning)
        for batch in loader:
            (grad,) = torch.autograd.grad((weight * batch).sum(), [weight])
            with torch.no_grad():
                weight -= 0.01 * grad
        with torch.no_grad():
            evaluator(torch.ones(2))
    assert hooks_left() == 0
