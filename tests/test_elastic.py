"""seeder.ElasticDataLoader in one process: ranks given explicitly, states moved between world
sizes."""

from __future__ import annotations

import importlib
import logging
import random
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seeder
from seeder import SeederWarning, StateError
from seeder._seeding.derive import MAX_KEY, Domain, derive_seed, stream_seeds
from seeder.data._elastic import num_steps, rank_slice

N = 23


class Augmented(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(
            [float(i), random.random(), float(np.random.rand()), float(torch.rand(()))],
            dtype=torch.float64,
        )


def loaders(s, world, batch=None, **kw):
    return [
        seeder.ElasticDataLoader(
            Augmented(),
            batch_size=batch or 4 // world,
            shuffle=True,
            num_replicas=world,
            rank=r,
            seeder=s,
            **kw,
        )
        for r in range(world)
    ]


def rows(batches):
    return {int(row[0]): row for b in batches for row in b}


@pytest.fixture
def s():
    s = seeder.Seeder()
    s.init(5)
    s.reseed(1, 0)
    return s


def test_same_samples_and_draws_on_any_world_size_and_worker_count(s):
    one = rows(loaders(s, 1, num_workers=2)[0])
    assert sorted(one) == list(range(N))
    for world in (2, 4):
        parts = [list(ld) for ld in loaders(s, world)]
        assert Counter(int(r[0]) for p in parts for b in p for r in b) == Counter(range(N))
        got = rows(b for p in parts for b in p)
        assert all(torch.equal(got[i], one[i]) for i in range(N))
    # The global order is the one-replica seeder.DistributedSampler's order.
    order = [int(r[0]) for b in loaders(s, 1)[0] for r in b]
    assert order == list(seeder.DistributedSampler(range(N), num_replicas=1, rank=0, seeder=s))
    # Sample at position p draws from random seeded with derive(ELASTIC, task 1, epoch 0, p >> 32, p
    # & 0xFFFFFFFF).
    assert [one[i][1].item() for i in order] == [
        random.Random(derive_seed(5, Domain.ELASTIC, 1, 0, 0, p)).random() for p in range(N)
    ]
    s.reseed(1, 1)
    assert [int(r[0]) for b in loaders(s, 1)[0] for r in b] != order


def test_state_moves_between_world_sizes_through_seeder_state_dict(caplog):
    two = seeder.Seeder()
    two.init(9, ngpus=2, rank=1)
    gen = torch.Generator()
    two.register_generator(gen)
    ld = loaders(two, 2)[1]
    two.reseed(1, 0)
    it = iter(ld)
    seen = [next(it), next(it)]
    st = two.state_dict()
    assert st["world_size"] == 2 and st["participants"]["loader.0"]["position"] == 8
    gathered = {
        "format": "seeder-gathered",
        "version": st["version"],
        "world_size": 2,
        "ranks": [{**st, "rank": 0}, st],
    }  # as gather_state_dict() on 2 ranks makes it
    three = seeder.Seeder()
    three.init(9)
    moved = loaders(three, 1)[0]
    three.load_state_dict(gathered)
    assert moved.state_dict()["position"] == 8

    one = seeder.Seeder()
    one.init(9)
    mine = torch.Generator()
    one.register_generator(mine)
    single = loaders(one, 1)[0]
    with caplog.at_level(logging.INFO, logger="seeder"):
        one.load_state_dict(st)  # no allow_world_change needed: the loader's state is global
    assert "re-derived" in caplog.text
    assert one.get_master_seed() == 9 and single.state_dict()["position"] == 8
    # This rank's streams: derive(ELASTIC_RANK, task, epoch, rank, stream=global step 2), word k for
    # generator k.
    words = np.random.SeedSequence(
        9, spawn_key=(int(Domain.ELASTIC_RANK), 1, 0, 0, 2)
    ).generate_state(2, np.uint64)
    assert int(words[0]) == derive_seed(9, Domain.ELASTIC_RANK, 1, 0, 0, 2)
    assert torch.equal(
        torch.get_rng_state(), torch.Generator().manual_seed(int(words[0])).get_state()
    )
    assert torch.equal(mine.get_state(), torch.Generator().manual_seed(int(words[1])).get_state())
    one.reseed(1, 0)  # skipped: the loaded state stands inside epoch 0
    assert torch.equal(
        torch.get_rng_state(), torch.Generator().manual_seed(int(words[0])).get_state()
    )
    rest = [int(r[0]) for b in single for r in b]
    trained = [int(r[0]) for b in seen for r in b]
    assert len(rest) == N - 8 and not set(rest) & set(trained)
    assert (
        MAX_KEY == 2**32 - 1
    )  # shared generators take rank 2**32 - 1 in this derivation (docs/elastic.md)


def test_world_change_refused_with_non_elastic_state_and_bad_loader_state_changes_nothing(s):
    two = seeder.Seeder()
    two.init(9, ngpus=2, rank=0)
    ld = loaders(two, 2)[0]
    two.reseed(1, 0)
    next(iter(ld))
    st = two.state_dict()

    sharded = seeder.DistributedSampler(
        range(N), seeder=two
    )  # a per-rank state: cannot move to another world
    st_sharded = two.state_dict()
    other = seeder.Seeder()
    other.init(1)
    elastic = loaders(other, 1)[0]
    plain = seeder.DistributedSampler(range(N), seeder=other)
    with pytest.raises(StateError, match="world of 2"):
        other.load_state_dict(st_sharded)
    del plain, sharded
    bad = {
        **st,
        "participants": {"loader.0": {**st["participants"]["loader.0"], "position": N + 1}},
    }
    before = torch.get_rng_state()
    with pytest.raises(StateError, match="position"):
        other.load_state_dict(bad)
    assert torch.equal(torch.get_rng_state(), before) and elastic.state_dict()["position"] == 0
    assert other.get_master_seed() == 1


def test_global_batch_change_is_refused_unless_allowed(s):
    ld = loaders(s, 2)[0]
    it = iter(ld)
    next(it)
    st = ld.state_dict()
    assert st["global_batch_size"] == 4 and st["position"] == 4
    three = seeder.ElasticDataLoader(Augmented(), batch_size=3, shuffle=True, seeder=s)
    with pytest.raises(
        StateError, match="global batch size is 4 samples per step, this loader's is 3"
    ):
        three.load_state_dict(st)
    assert three.state_dict()["position"] == 0
    full = rows(loaders(s, 1)[0])
    moved = seeder.ElasticDataLoader(
        Augmented(), batch_size=3, shuffle=True, seeder=s, allow_global_batch_change=True
    )
    moved.load_state_dict(st)
    got = [b for b in moved]
    assert [len(b) for b in got] == [3] * 6 + [1]
    first = [int(r[0]) for r in next(iter(loaders(s, 1)[0]))]
    rest = rows(got)
    assert sorted(first + list(rest)) == list(range(N))
    assert all(torch.equal(rest[i], full[i]) for i in rest)
    assert moved.state_dict()["position"] == N


def test_refusals():
    s = seeder.Seeder()
    s.init(0)
    with pytest.raises(TypeError, match="owns the order"):
        seeder.ElasticDataLoader(
            range(4), sampler=seeder.DistributedSampler(range(4), seeder=s), seeder=s
        )
    with pytest.raises(ValueError, match="rank must be in"):
        seeder.ElasticDataLoader(range(4), num_replicas=2, rank=2, seeder=s)
    with pytest.raises(TypeError, match="needs a map-style dataset"):
        seeder.ElasticDataLoader(Stream(), seeder=s)
    with pytest.raises(TypeError, match="drop elastic=True"):
        seeder.ElasticDataLoader(range(4), elastic=True, seeder=s)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.mark.parametrize("dataset", [range(4), Stream()], ids=["map", "stream"])
@pytest.mark.parametrize("value", [True, False, 1])
def test_data_loader_refuses_elastic_and_names_the_elastic_class(dataset, value):
    """seeder.DataLoader(..., elastic=...) does not dispatch: a TypeError names
    seeder.ElasticDataLoader, and nothing joins the seeder."""
    s = seeder.Seeder()
    s.init(0)
    with pytest.raises(TypeError, match="seeder.ElasticDataLoader") as err:
        seeder.DataLoader(dataset, batch_size=2, elastic=value, seeder=s)
    assert ("build seeder.ElasticDataLoader(" in str(err.value)) == (value is True)
    assert s.participants() == []


def test_each_loader_is_the_class_it_was_built_as():
    s = seeder.Seeder()
    s.init(0)
    assert (
        type(seeder.ElasticDataLoader(range(4), batch_size=2, seeder=s)) is seeder.ElasticDataLoader
    )
    assert type(seeder.DataLoader(range(4), batch_size=2, seeder=s)) is seeder.DataLoader
    assert (
        seeder.ElasticDataLoader
        is importlib.import_module("seeder.data._elastic_loader").ElasticDataLoader
    )
    assert "ElasticDataLoader" in seeder.__all__


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    per_rank=st.integers(1, 5),
    world=st.integers(1, 6),
    drop_last=st.booleans(),
    origin=st.integers(0, 7),
)
def test_rank_slices_cover_each_position_once(n, per_rank, world, drop_last, origin):
    """Over all ranks and steps, the slices cover the epoch from ``origin`` once (less a short last
    batch if dropped)."""
    g = per_rank * world
    steps = num_steps(n, origin, g, drop_last)
    covered = Counter(
        p
        for step in range(steps)
        for r in range(world)
        for p in range(*rank_slice(step, g, origin, world, r, n))
    )
    end = origin + steps * g if drop_last else n
    assert covered == Counter(range(origin, max(end, origin)))
    for step in range(steps):
        sizes = [len(range(*rank_slice(step, g, origin, world, r, n))) for r in range(world)]
        assert max(sizes) - min(sizes) <= 1 and (sizes == [per_rank] * world or step == steps - 1)


def test_persistent_workers_follow_the_epochs(s):
    persistent = loaders(s, 1, num_workers=1, persistent_workers=True)[0]
    first = rows(persistent)
    assert all(torch.equal(first[i], v) for i, v in rows(loaders(s, 1)[0]).items())
    s.reseed(1, 1)
    second = rows(persistent)
    assert all(torch.equal(second[i], v) for i, v in rows(loaders(s, 1)[0]).items())
    assert not torch.equal(first[0], second[0])


# ----------------------------------------------------------------------------------- seeding at the
# RNGs' cost
USES = st.lists(
    st.sampled_from(
        [
            "none",
            "random",
            "gauss",
            "random-624",
            "numpy",
            "numpy-normal",
            "numpy-624",
            "torch",
            "all",
        ]
    ),
    min_size=1,
    max_size=12,
)
WORDS = (
    624 * 32
)  # bits of a Mersenne Twister's key: a draw of that many leaves the position where it was


def draw(use):
    """A fetch drawing from the RNGs ``use`` names (gauss draws keep a cached value between calls;
    a -624 draw takes one key's worth of 32-bit words)."""
    out = [float(torch.rand(()))] if use in ("torch", "all") else []
    if use in ("random", "all"):
        out.append(random.random())
    if use == "gauss":
        out.append(random.gauss(0, 1))
    if use == "random-624":
        out.append(
            random.getrandbits(WORDS) >> (WORDS - 64)
        )  # the last word's bits, readable in a failure
    if use in ("numpy", "all"):
        out.append(float(np.random.rand()))
    if use == "numpy-normal":
        out.append(float(np.random.standard_normal()))
    if use == "numpy-624":
        out.append(np.random.bytes(WORDS // 8)[-8:])
    return out


@settings(max_examples=60, deadline=None)
@given(
    uses=USES,
    seeds=st.lists(st.integers(0, 2**64 - 1), min_size=12, max_size=12),
    batch=st.integers(1, 12),
    declared=st.sets(st.sampled_from(["python", "numpy", "torch"])),
)
def test_sample_seeding_fetches_each_sample_once_and_exactly_or_warns(uses, seeds, batch, declared):
    """SampleSeeding seeds the declared RNGs before every sample and watches the others: each sample
    is fetched once; every item equals the one fetched with every RNG seeded, or a batch in which a
    sample drew from an undeclared RNG warns (and that RNG is seeded from then on), whatever the
    order in which samples start drawing and the batches."""
    from seeder.data._elastic import SampleSeeding
    from seeder.data._workers import fetch_adapters, seed_globals

    adapters = fetch_adapters()
    seeds = seeds[: len(uses)]
    want = []
    for use, seed in zip(uses, seeds):
        seed_globals(seed)
        want.append(draw(use))
    random.gauss(0, 1), np.random.standard_normal()  # leave Gaussians cached in the unseeded RNGs
    lazy = SampleSeeding(
        [a for a in adapters if a.name in declared], [a for a in adapters if a.name not in declared]
    )
    calls = Counter()

    def counted(k):
        calls[k] += 1
        return draw(uses[k])

    got, warned = [], set()
    for at in range(0, len(uses), batch):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            part = lazy.fetch(
                counted, range(at, min(at + batch, len(uses))), seeds[at : at + batch]
            )
        names = {use_rngs(uses[k]) for k in range(at, at + len(part))}
        undeclared = set().union(*names) - declared - warned
        assert bool(caught) == bool(undeclared), (caught, undeclared)
        assert all(
            issubclass(w.category, SeederWarning) and "sample_rngs" in str(w.message)
            for w in caught
        )
        if not undeclared:  # every draw of the batch came from an RNG seeded with its sample's seed
            assert part == want[at : at + len(part)]
        warned |= undeclared
        got += part
    assert calls == Counter(range(len(uses)))
    assert {a.name for a in lazy.seeded} == declared | warned


def use_rngs(use):
    """The global RNGs ``draw(use)`` draws from."""
    return (
        frozenset({"torch"} if use in ("torch", "all") else set())
        | ({"python"} if use in ("random", "gauss", "random-624", "all") else set())
        | ({"numpy"} if use in ("numpy", "numpy-normal", "numpy-624", "all") else set())
    )


@pytest.mark.parametrize("rng", ["random", "numpy"])
def test_a_sample_drawing_exactly_one_key_of_words_is_seen_though_the_position_is_back(rng):
    """624 words drawn from Python's or NumPy's RNG regenerate the key and leave the position where
    it was: the watcher still changes (it holds two key words), and a watched RNG that drew
    warns."""
    from seeder._seeding.rngs import NumpyRandomStateAdapter, PythonRandomAdapter
    from seeder.data._elastic import SampleSeeding

    adapter = PythonRandomAdapter() if rng == "random" else NumpyRandomStateAdapter()
    position = (
        (lambda: random.getstate()[1][624])
        if rng == "random"
        else (lambda: int(np.random.get_state()[2]))
    )
    watch = adapter.watcher()
    assert watch is not None
    random.seed(11), np.random.seed(11)
    random.random(), np.random.rand()  # a position inside the key
    before, at = watch(), position()
    draw(f"{rng}-624")
    assert position() == at and watch() != before

    lazy = SampleSeeding([], [adapter])
    with pytest.warns(SeederWarning, match=f"drew from the global RNG.s. {adapter.name}"):
        lazy.fetch(draw, [f"{rng}-624"], [5])
    assert [a.name for a in lazy.seeded] == [adapter.name]


def test_watched_rngs_that_no_sample_draws_from_stay_unseeded_and_silent():
    """With every global RNG watched (sample_rngs=()), fetches that draw nothing seed nothing and
    warn nothing; the first that draws from torch warns, and torch is seeded from then on."""
    from seeder.data._elastic import SampleSeeding
    from seeder.data._workers import fetch_adapters

    lazy = SampleSeeding([], fetch_adapters())
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    states = random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lazy.fetch(draw, ["none"] * 5, [1, 2, 3, 4, 5]) == [[]] * 5
    assert lazy.seeded == [] and torch.equal(
        torch.get_rng_state(), states[2]
    )  # nothing drew: nothing seeded
    with pytest.warns(SeederWarning, match="torch"):
        lazy.fetch(draw, ["torch"], [1])
    items = lazy.fetch(draw, ["torch", "none", "torch"], [1, 2, 1])
    assert items[0] == items[2] and items[1] == []
    assert [a.name for a in lazy.seeded] == ["torch"]
    assert (random.getstate(), np.random.get_state()[1].tolist()) == states[:2]


def test_the_elastic_loader_seeds_a_sample_that_starts_drawing_late_as_the_others(s):
    """Samples 0-9 draw nothing from Python's RNG, later ones do: with 0 and 2 workers every
    sample's draw is that of random seeded with its position's seed."""

    class Late(torch.utils.data.Dataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return torch.tensor(
                [float(i), random.random() if i >= 10 else -1.0], dtype=torch.float64
            )

    for workers in (0, 2):
        ld = seeder.ElasticDataLoader(
            Late(),
            batch_size=4,
            shuffle=True,
            num_replicas=1,
            rank=0,
            seeder=s,
            num_workers=workers,
        )
        got = [row for b in ld for row in b]
        want = [
            random.Random(derive_seed(5, Domain.ELASTIC, 1, 0, 0, p)).random()
            if int(r[0]) >= 10
            else -1.0
            for p, r in enumerate(got)
        ]
        assert [r[1].item() for r in got] == want, workers


def test_sample_rngs_is_checked_before_anything_changes(s):
    before = s.participants()
    with pytest.raises(ValueError, match="sample_rngs names the global RNGs"):
        seeder.ElasticDataLoader(range(4), sample_rngs=("cuda",), seeder=s)
    for bad in ("torch", b"torch", 3, None):
        with pytest.raises(TypeError, match="sample_rngs must be a collection of RNG names"):
            seeder.ElasticDataLoader(range(4), sample_rngs=bad, seeder=s)
    assert s.participants() == before


@pytest.mark.parametrize(
    "names",
    [{"torch", "numpy"}, frozenset({"numpy", "torch"}), ("torch", "numpy"), ["numpy", "torch"]],
)
def test_sample_rngs_takes_any_collection_of_names_as_its_error_says(s, names):
    from seeder.data._elastic import check_sample_rngs

    assert check_sample_rngs(names) == ("numpy", "torch")
    assert check_sample_rngs(iter(sorted(names))) == ("numpy", "torch")
    loader = seeder.ElasticDataLoader(range(4), sample_rngs=names, seeder=s)
    assert loader is not None


def test_a_state_of_another_world_loads_before_its_elastic_loader_is_built():
    """Load first, build the loader after (as many resumes do): the loader claims its global
    position when it is built, and this rank's streams are then re-derived exactly as when the
    loader existed before the load."""
    two = seeder.Seeder()
    two.init(9, ngpus=2, rank=1)
    two.register_generator(torch.Generator())
    ld = loaders(two, 2)[1]
    two.reseed(1, 0)
    it = iter(ld)
    trained = [int(r[0]) for b in (next(it), next(it)) for r in b]
    st = two.state_dict()

    def resumed(build_first):
        one = seeder.Seeder()
        one.init(9)
        mine = torch.Generator()
        one.register_generator(mine)
        loader = loaders(one, 1)[0] if build_first else None
        one.load_state_dict(st)
        if loader is None:
            assert one.pending.names() == ["seeder.DataLoader loader.0"]
            with pytest.raises(StateError, match="loader.0"):
                one.state_dict()  # nothing is saved while the loader's part waits
            loader = loaders(one, 1)[0]  # claims it
        streams = (torch.get_rng_state(), mine.get_state(), random.getstate())  # read, not drawn
        one.reseed(1, 0)  # skipped: the state stands inside epoch 0
        return [int(r[0]) for b in loader for r in b], streams

    built_after, streams_after = resumed(False)
    built_before, streams_before = resumed(True)
    assert (
        built_after == built_before
        and len(built_after) == N - 8
        and not set(built_after) & set(trained)
    )
    assert all(torch.equal(a, b) for a, b in zip(streams_after[:2], streams_before[:2]))
    assert streams_after[2] == streams_before[2]


def test_two_elastic_loaders_at_different_steps_move_together():
    """Two elastic loaders saved at different global steps on 2 ranks continue on 1 rank, each with
    the samples and draws its own uninterrupted epoch has after its step (this rank's streams follow
    the first loader's step)."""

    def pair(s, world, rank):
        kw = dict(shuffle=True, num_replicas=world, rank=rank, seeder=s)
        return (
            seeder.ElasticDataLoader(Augmented(), batch_size=4 // world, **kw),
            seeder.ElasticDataLoader(Augmented(), batch_size=6 // world, **kw),
        )

    ref = seeder.Seeder()
    ref.init(4)
    ref.reseed(1, 0)
    a_full, b_full = (rows(ld) for ld in pair(ref, 1, 0))

    two = seeder.Seeder()
    two.init(4, ngpus=2, rank=0)
    a, b = pair(two, 2, 0)
    two.reseed(1, 0)
    ia, ib = iter(a), iter(b)
    done_a = rows([next(ia), next(ia)])  # global step 2 of a (8 samples over both ranks)
    done_b = rows([next(ib)])  # global step 1 of b (6 samples)
    st = two.state_dict()

    one = seeder.Seeder()
    one.init(4)
    a1, b1 = pair(one, 1, 0)
    one.load_state_dict(st)
    one.reseed(1, 0)  # skipped: inside epoch 0
    rest_a, rest_b = rows(a1), rows(b1)
    assert len(rest_a) == N - 8 and len(rest_b) == N - 6
    assert not set(rest_a) & set(done_a) and not set(rest_b) & set(done_b)
    assert all(torch.equal(rest_a[i], a_full[i]) for i in rest_a)
    assert all(torch.equal(rest_b[i], b_full[i]) for i in rest_b)


@settings(max_examples=40, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 9), st.integers(-20, 40)),
        min_size=1,
        max_size=30,
    ),
    width=st.integers(1, 3),
    near=st.sampled_from([0, 2**32 - 100, 2**33 - 7]),
)
def test_seeds_computed_ahead_are_those_of_each_position(requests, width, near):
    """PositionSeeds hands out the derivation's seed words of every position asked for, whatever the
    pattern of requests: strided runs (computed ahead), jumps (a resume), another epoch, short runs,
    runs across 2**32."""
    from seeder.data._elastic import PositionSeeds

    seeds, first = PositionSeeds(), near
    for epoch, count, stride in requests:
        want = [
            derive_seed(5, Domain.ELASTIC, 1, epoch, p >> 32, p & MAX_KEY)
            for p in range(first, first + count)
        ]
        got = seeds.words(5, 1, epoch, first, count, width)
        assert got[::width] == want and len(got) == count * width
        if width > 1:
            assert got == [
                w
                for p in range(first, first + count)
                for w in stream_seeds(5, int(Domain.ELASTIC), 1, epoch, p >> 32, width).seed(
                    p & MAX_KEY
                )
            ]
        first = max(0, first + stride)
