"""A plain torch DataLoader and torchdata's StatefulDataLoader around seeder's sampler: exact, or
one warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.utils.data
from optional import need
from test_loader import BS, MASTER, Noisy

import seeder
from seeder import DistributedSampler, Seeder, SeederWarning
from seeder.data import SeededDataset

StatefulDataLoader = need("torchdata.stateful_dataloader", "StatefulDataLoader").StatefulDataLoader

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def plain(num_workers=0, generator=True, wrap=False, shown=True):
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    ds = SeededDataset(Noisy(), seeder=s) if wrap else Noisy()
    smp = DistributedSampler(ds, seeder=s)
    gen = seeder.data.dataloader_generator(seeder=s) if generator else None
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BS, sampler=smp, num_workers=num_workers, generator=gen
    )
    return s, smp, seeder.data.watch_loader(loader) if shown else loader


def seeder_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, SeederWarning)]


def test_no_generator_warns_once():
    s, smp, loader = plain(generator=False)
    it = iter(loader)
    smp.advance(len(next(it)))
    got = seeder_warnings(s.state_dict) + seeder_warnings(s.state_dict)
    assert (
        len(got) == 1
        and "no generator" in got[0]
        and "generator=seeder.data.dataloader_generator()" in got[0]
    )


def resumed(generator, draw_after_load=False, shown=True):
    """A run stopped after two batches and resumed in a fresh seeder: (warnings at the resumed
    epoch's start, the resumed batches, the reference batches, torch's next draw in both)."""
    s, smp, loader = plain(generator=generator, shown=shown)
    it = iter(loader)
    for _ in range(2):
        smp.advance(len(next(it)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = s.state_dict()
    ref_rest, ref_next = list(it), torch.rand(1)
    s2, smp2, loader2 = plain(generator=generator, shown=shown)
    s2.load_state_dict(state)
    if draw_after_load:
        torch.rand(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rest = list(loader2)
    got = [str(w.message) for w in caught if issubclass(w.category, SeederWarning)]
    return got, rest, ref_rest, torch.rand(1), ref_next


def test_a_resume_without_generator_warns_when_its_epoch_starts_and_with_one_is_exact():
    got, rest, ref_rest, after, ref_after = resumed(generator=False)
    assert len(got) == 2 and "torch's global RNG moved since seeder.load_state_dict()" in got[0], (
        got
    )
    assert "generator=seeder.data.dataloader_generator()" in got[0]
    assert got[1].startswith(
        "seeder.DistributedSampler resumed inside epoch 0: no generator:"
    )  # the loader shown
    assert not torch.equal(
        after, ref_after
    )  # what the warning is about: torch's stream is one draw ahead
    got, rest, ref_rest, after, ref_after = resumed(generator=True)
    assert got == [] and torch.equal(after, ref_after)
    assert all(torch.equal(a, b) for a, b in zip(rest, ref_rest)) and len(rest) == len(ref_rest)


def test_a_draw_between_load_and_resumed_epoch_warns():
    got, *_ = resumed(generator=True, draw_after_load=True)
    assert len(got) == 1 and "before seeder.load_state_dict()" in got[0], got


def test_a_loader_not_shown_warns_once_when_a_state_is_taken_and_when_a_resumed_epoch_starts():
    """torch gives a sampler no loader: unless seeder.data.watch_loader() shows it, seeder says it
    cannot check it."""
    s, smp, loader = plain(generator=False, shown=False)
    it = iter(loader)
    smp.advance(len(next(it)))
    got = seeder_warnings(s.state_dict) + seeder_warnings(s.state_dict)
    assert (
        len(got) == 1
        and "loader not shown" in got[0]
        and "seeder.data.watch_loader(loader)" in got[0]
    ), got
    assert "no generator" not in got[0]
    got, rest, ref_rest, *_ = resumed(generator=True, shown=False)
    assert len(got) == 1 and got[0].startswith(
        "seeder.DistributedSampler resumed inside epoch 0: loader not shown"
    )
    assert all(torch.equal(a, b) for a, b in zip(rest, ref_rest)) and len(rest) == len(ref_rest)
    s, smp, loader = plain()  # shown, at an epoch's start: nothing to say
    assert seeder_warnings(s.state_dict) == []


def test_watch_loader_names_what_it_needs():
    with pytest.raises(
        TypeError, match="holds no seeder.DistributedSampler.*sampler=seeder.DistributedSampler"
    ):
        seeder.data.watch_loader(torch.utils.data.DataLoader(range(4)))
    s, smp, _ = plain()
    batches = torch.utils.data.BatchSampler(smp, BS, drop_last=False)
    loader = torch.utils.data.DataLoader(Noisy(), batch_sampler=batches)
    assert seeder.data.watch_loader(loader) is loader  # found inside the batch sampler

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    stream = seeder.IterableDataLoader(Stream(), seeder=s)
    assert (
        seeder.data.watch_loader(stream) is stream
    )  # a seeder loader needs no watch: returned as it is


def test_complete_recipe_does_not_warn():
    s, smp, loader = plain(generator=True)
    it = iter(loader)
    smp.advance(len(next(it)))
    assert seeder_warnings(s.state_dict) == []


def test_mid_epoch_without_position_warns():
    s, smp, loader = plain()
    next(iter(loader))
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "no sample was reported consumed" in got[0] and "advance" in got[0]


def test_exhausted_but_not_consumed_warns():
    s, smp, loader = plain()
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "drew every index of epoch 0" in got[0]


@pytest.mark.slow
def test_workers_without_position_seeding_warn_and_seeded_dataset_does_not():
    s, smp, loader = plain(num_workers=2)
    it = iter(loader)
    smp.advance(len(next(it)))
    got = seeder_warnings(s.state_dict)
    assert len(got) == 1 and "worker randomness" in got[0] and "SeededDataset" in got[0]
    del it
    s, smp, loader = plain(num_workers=2, wrap=True)
    it = iter(loader)
    smp.advance(len(next(it)))
    assert seeder_warnings(s.state_dict) == []


def stateful(num_workers):
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    ds = SeededDataset(Noisy(), seeder=s)
    smp = DistributedSampler(ds, seeder=s)
    return seeder.data.watch_loader(
        StatefulDataLoader(
            ds,
            batch_size=BS,
            sampler=smp,
            num_workers=num_workers,
            generator=seeder.data.dataloader_generator(seeder=s),
        )
    )


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_stateful_dataloader_resumes_exactly(num_workers):
    ref = list(stateful(num_workers))
    loader = stateful(num_workers)
    it = iter(loader)
    head = [next(it) for _ in range(2)]
    states = []
    assert (
        seeder_warnings(lambda: states.append(loader.state_dict())) == []
    )  # torchdata keeps the position:
    assert seeder_warnings(loader.state_dict) == []  # no advance() needed, from the first state on
    state = states[0]
    again = stateful(num_workers)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(ref) - 2  # not the whole epoch again
    assert all(torch.equal(a, b) for a, b in zip(head + rest, ref))


def test_sampler_iterator_state_is_o1():
    s = Seeder()
    s.init(MASTER)
    big = DistributedSampler(range(10**8), seeder=s)
    s.reseed(1, 0)
    it = iter(big)
    first = [next(it) for _ in range(5)]
    st = it.state_dict()
    assert st["yielded"] == 5
    fresh = iter(big)
    fresh.load_state_dict({"format": "seeder.sampler_iter", "yielded": 3})
    assert [next(fresh), next(fresh)] == first[3:]


def test_the_resume_check_is_kept_for_each_participant_that_asked():
    """Every loader or sampler resumed inside an epoch compares at its own first batch; one that did
    not ask neither compares nor uses up the copy."""
    import random

    from seeder._seeding.rngs import global_adapters
    from seeder._state.resumecheck import ResumeCheck

    class Owner:
        pass

    a, b, other = Owner(), Owner(), Owner()
    check = ResumeCheck()
    check.want(a)
    check.want(b)
    check.arm(global_adapters())
    assert check.moved(other) == []
    random.random()
    assert check.moved(a) == ["python"] and check.moved(b) == ["python"]
    assert check.moved(a) == []  # once per load


def worker_seeded(num_workers, watched=False):
    """torchdata's loader over a dataset without per-sample seeds, workers seeded by
    ``seeder.data.worker_init_fn`` (per worker and epoch)."""
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    ds = Noisy()
    loader = StatefulDataLoader(
        ds,
        batch_size=BS,
        sampler=DistributedSampler(ds, seeder=s),
        num_workers=num_workers,
        worker_init_fn=seeder.data.make_worker_init_fn(seeder=s),
        generator=seeder.data.dataloader_generator(seeder=s),
    )
    return seeder.data.watch_loader(loader) if watched else loader


@pytest.mark.parametrize(
    "num_workers,watched",
    [(0, False), pytest.param(2, False, marks=pytest.mark.slow), (2, True)],
)
def test_a_stateful_dataloader_resumed_inside_an_epoch_without_per_sample_seeds_warns(
    num_workers, watched
):
    """A resume inside an epoch would continue the order with other augmentations (workers' RNGs
    start afresh): one warning at the resume naming SeededDataset. At the epoch's end, none."""
    ref = list(worker_seeded(num_workers))
    loader = worker_seeded(num_workers, watched)
    it = iter(loader)
    head = [next(it) for _ in range(2)]
    state = loader.state_dict()
    del it
    again = worker_seeded(num_workers, watched)
    rest = []
    got = seeder_warnings(lambda: (again.load_state_dict(state), rest.extend(again)))
    assert len(got) == 1 and "SeededDataset" in got[0], got
    assert "worker randomness" in got[0] if watched else "random numbers not continued" in got[0]
    if num_workers and not watched:
        # what it warns of: the order continues, the random numbers do not
        assert [b[:, 0].tolist() for b in head + rest] == [b[:, 0].tolist() for b in ref]
        assert not all(torch.equal(a, b) for a, b in zip(head + rest, ref))
    if watched:  # a shown loader with workers is warned of as its state is taken, too
        return
    whole = worker_seeded(num_workers)
    list(whole)
    done = whole.state_dict()
    fresh = worker_seeded(num_workers)
    assert seeder_warnings(lambda: (fresh.load_state_dict(done), list(fresh))) == []
