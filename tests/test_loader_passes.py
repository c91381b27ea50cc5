"""A shuffled seeder.DataLoader iterated again in the same epoch (no reseed) repeats the last pass's
order, where torch's DataLoader reshuffles: one SeederWarning naming seeder.reseed(1, epoch); none
where the epochs are reseeded as documented, or the order would not change under torch."""

from __future__ import annotations

import warnings

import pytest
import torch

import seeder
from seeder import Seeder, SeederWarning


def passes(loader, n):
    """``n`` passes over ``loader``: (their batches, the SeederWarnings given)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [[b.tolist() for b in loader] for _ in range(n)]
    return got, [str(w.message) for w in caught if issubclass(w.category, SeederWarning)]


def build(shuffle=True, reseed=None, elastic=False):
    s = Seeder()
    s.init(5)
    if reseed is not None:
        s.reseed(1, reseed)
    kind = seeder.ElasticDataLoader if elastic else seeder.DataLoader
    return s, kind(torch.arange(10), batch_size=4, shuffle=shuffle, seeder=s)


@pytest.mark.parametrize("elastic", [False, True])
@pytest.mark.parametrize("reseed", [None, 0])
def test_a_shuffled_pass_again_in_the_same_epoch_warns_once_naming_reseed(reseed, elastic):
    s, loader = build(reseed=reseed, elastic=elastic)
    got, said = passes(loader, 3)
    assert got[0] == got[1] == got[2]  # what it warns of
    assert len(said) == 1 and "iterated again in epoch 0" in said[0]
    assert "seeder.reseed(1, epoch)" in said[0]


def test_epochs_reseeded_as_documented_never_warn_and_change_order():
    s, loader = build()
    orders, said = [], []
    for epoch in range(3):
        s.reseed(1, epoch)
        got, w = passes(loader, 1)
        orders += got
        said += w
    with pytest.warns(SeederWarning, match="already called"):  # the seeder's, not the loader's
        s.reseed(1, 2)  # the same epoch again, asked for: its order again
    got, w = passes(loader, 1)
    assert said == [] and w == [] and got[0] == orders[2]
    assert orders[0] != orders[1] != orders[2]


def test_no_warning_where_a_torch_loader_would_not_reshuffle_or_the_pass_was_cut():
    _, plain = build(shuffle=False, reseed=0)
    assert passes(plain, 2)[1] == []
    _, loader = build(reseed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        next(iter(loader))  # a look at the first batch, then the pass
        list(loader)
    assert not [w for w in caught if issubclass(w.category, SeederWarning)]


def test_other_tasks_reseeds_do_not_count_as_the_epochs():
    s, loader = build(reseed=0)
    list(loader)
    s.reseed(2, 0)  # a validation task's reseed: the training loader's epoch stays
    assert len(passes(loader, 1)[1]) == 1
