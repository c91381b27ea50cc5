"""seeder.IterableDataLoader over sharded streams: examples seeded by (epoch, shard, position), and
a state of shard positions that continues the epoch on another worker count, batch size or world
size.

Ranks here are in one process (``RANK``/``WORLD_SIZE`` set before ``seeder.init``, 0 workers: what a
rank reads is a function of its rank alone) and their states are gathered by hand into the dict
``seeder.gather_state_dict()`` returns; ``tests/test_stream_shards_ranks.py`` does the same with
torchrun ranks and DataLoader workers. Every state goes through torch.save / torch.load.
"""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seeder
from seeder import IterableDataLoader, Seeder, SeederWarning, StateError

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from shard_common import SIZES, Shards, flat, hf_sharded, rows  # noqa: E402

MASTER = 5
ALL = sum(SIZES)


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def rank_env(monkeypatch, rank, world):
    for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
        monkeypatch.setenv(k, str(v))


def make(make_ds=Shards, workers=0, bs=3, **kw):
    s = Seeder()
    s.init(MASTER)
    return s, IterableDataLoader(make_ds(), batch_size=bs, num_workers=workers, seeder=s, **kw)


def epoch0(s, loader, stop=None):
    """Batches of epoch 0 (as lists); with ``stop``, those up to it and ``s.state_dict()``."""
    s.reseed(1, 0)
    out = []
    for k, b in enumerate(loader, 1):
        out.append(flat(b))
        if k == stop:
            return out, roundtrip(s.state_dict())
    return out, None


def gathered(states):
    return {
        "format": "seeder-gathered",
        "version": states[0]["version"],
        "world_size": len(states),
        "ranks": states,
    }


@pytest.mark.parametrize("workers", [0, 2])
def test_same_topology_resumes_bitwise_order_included(workers):
    want, _ = epoch0(*make(workers=workers))
    assert len(rows(want)) == ALL and len({r[:2] for r in rows(want)}) == ALL
    for stop in [1, 5] if workers == 0 else [4]:
        head, state = epoch0(*make(workers=workers), stop=stop)
        s, loader = make(workers=workers)
        s.load_state_dict(state)
        tail, _ = epoch0(s, loader)
        assert head + tail == want, stop


def test_what_an_example_draws_is_the_same_on_any_worker_count_and_batch_size():
    want = rows(epoch0(*make())[0])
    for workers, bs in [(2, 3), (3, 2), (0, 5)]:
        assert rows(epoch0(*make(workers=workers, bs=bs))[0]) == want, (workers, bs)


def test_other_worker_count_and_batch_size_continue_every_example_once(caplog):
    want = rows(epoch0(*make())[0])
    head, state = epoch0(*make(workers=2), stop=3)
    for workers, bs in [(0, 3), (3, 4)]:
        s, loader = make(workers=workers, bs=bs)
        with caplog.at_level(logging.INFO, logger="seeder"):
            s.load_state_dict(state)
        assert "dealt again over" in caplog.text
        tail, _ = epoch0(s, loader)
        assert rows(head + tail) == want, (workers, bs)


def test_gathered_state_continues_on_other_world_sizes(monkeypatch):
    want = rows(epoch0(*make())[0])
    heads, states = [], []
    for rank in range(2):
        rank_env(monkeypatch, rank, 2)
        head, state = epoch0(*make(), stop=2)
        heads += head
        states.append(state)
    saved = roundtrip(gathered(states))
    for world in (3, 1):
        tails = []
        for rank in range(world):
            rank_env(monkeypatch, rank, world)
            s, loader = make()
            s.load_state_dict(saved)
            tails += epoch0(s, loader)[0]
        assert rows(heads + tails) == want, world


def test_datasets_stream_by_shard_is_exact_and_moves_across_worker_counts():
    pytest.importorskip("datasets")
    for shuffle in (False, True):
        ds = lambda shuffle=shuffle: hf_sharded(shuffle=shuffle)  # noqa: E731
        want, _ = epoch0(*make(ds, by_shard=True))
        assert sorted(int(r[3]) for r in rows(want)) == list(range(40))
        head, state = epoch0(*make(ds, by_shard=True), stop=4)
        s, loader = make(ds, by_shard=True)
        s.load_state_dict(state)
        assert head + epoch0(s, loader)[0] == want  # same topology: bitwise
        s, loader = make(ds, workers=2, bs=2, by_shard=True)
        s.load_state_dict(state)
        # every example once, each augmentation as before
        assert rows(head + epoch0(s, loader)[0]) == rows(want), shuffle


def test_a_state_missing_shards_is_refused_naming_the_fix_and_changes_nothing(monkeypatch):
    rank_env(monkeypatch, 1, 2)
    _, state = epoch0(*make(), stop=1)
    rank_env(monkeypatch, 0, 1)
    s, loader = make()
    before = loader.state_dict()
    with pytest.raises(StateError, match="gather_state_dict"):  # one rank's state, another world
        s.load_state_dict(state)
    part = state["participants"]["loader.0"]
    with pytest.raises(StateError, match="holds the shards of rank 1"):
        loader.load_state_dict(part)
    merged = seeder._state.streams.merge_ranks([part])
    merged["positions"] = merged["positions"][1:]  # a shard lost
    with pytest.raises(StateError, match="missing"):
        loader.load_state_dict(merged)
    assert loader.state_dict() == before


def test_shardless_streams_say_how_to_declare_shards(monkeypatch):
    class Plain(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    s = Seeder()
    s.init(0)
    with pytest.raises(ValueError, match="num_shards and iter_shard"):
        IterableDataLoader(Plain(), seeder=s, by_shard=True)
    with pytest.raises(ValueError, match="sample_rngs"):
        IterableDataLoader(Plain(), seeder=s, sample_rngs=["torch"])
    rank_env(monkeypatch, 0, 2)
    s2, plain = Seeder(), None
    s2.init(0)
    plain = IterableDataLoader(Plain(), batch_size=2, seeder=s2)
    s2.reseed(1, 0)
    next(iter(plain))
    state = s2.state_dict()
    rank_env(monkeypatch, 0, 1)
    s3 = Seeder()
    s3.init(0)
    IterableDataLoader(Plain(), batch_size=2, seeder=s3)
    with pytest.raises(StateError, match="docs/checkpoints.md#another-world-size"):
        s3.load_state_dict(state)  # the page says a stream moves once it declares its shards
    page = (Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md").read_text()
    assert "declares its shards" in page.split("## Another world size", 1)[1]
    sharded = make()[1]
    with pytest.raises(StateError, match="stream without shards"):
        sharded.load_state_dict(state["participants"]["loader.0"])


def test_sample_rngs_seeds_only_the_rngs_named_and_warns_once_for_others():
    class TorchOnly(Shards):
        def iter_shard(self, shard, start):
            for pos in range(start, self.sizes[shard]):
                yield torch.tensor([shard, pos, int(torch.randint(0, 10**6, ()))])

    want = rows(epoch0(*make(TorchOnly))[0])
    assert rows(epoch0(*make(TorchOnly, workers=0, bs=5, sample_rngs=["torch"]))[0]) == want
    with pytest.warns(SeederWarning, match="'python'") as seen:
        epoch0(*make(Shards, bs=16, sample_rngs=["torch"]))  # python watched, NumPy seeded
    assert len([w for w in seen if issubclass(w.category, SeederWarning)]) == 1


@pytest.mark.filterwarnings("error::seeder.SeederWarning")
def test_an_rng_left_out_is_seeded_where_watching_it_costs_more_exact_and_silent():
    """Reading NumPy's global state costs about 32 seedings: in batches up to 64 examples the
    loader seeds it before each example instead of watching it, and so does it for Python's
    ``random`` (about 5) in batches up to 10: the examples draw exactly what they draw with every
    RNG seeded, and nothing warns."""
    want = rows(epoch0(*make(Shards, bs=8))[0])
    assert rows(epoch0(*make(Shards, bs=8, sample_rngs=["torch"]))[0]) == want
    big = Shards([70, 3])
    want = rows(epoch0(*make(lambda: big, bs=64))[0])
    assert rows(epoch0(*make(lambda: big, bs=64, sample_rngs=["torch", "python"]))[0]) == want


def test_an_rng_left_out_is_watched_in_batches_past_its_reading_cost():
    with pytest.warns(SeederWarning, match="'numpy'"):
        epoch0(*make(lambda: Shards([70, 3]), bs=65, sample_rngs=["torch", "python"]))


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=7),
    before=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    after=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    stop=st.integers(1, 6),
)
def test_any_topology_and_stop_reads_every_example_once_drawing_the_same(
    monkeypatch, sizes, before, after, stop
):
    """Ranks x batch size before and after the stop, any stop: every example of the epoch once,
    with the draws of an uninterrupted single-process run."""
    ds = lambda: Shards(sizes)  # noqa: E731
    rank_env(monkeypatch, 0, 1)  # the fixture's environment outlives an example
    want = rows(epoch0(*make(ds))[0])
    heads, states = [], []
    for rank in range(before[0]):
        rank_env(monkeypatch, rank, before[0])
        s, loader = make(ds, bs=before[1])
        head, state = epoch0(s, loader, stop=stop)
        heads += head
        states.append(state if state is not None else roundtrip(s.state_dict()))
    saved = roundtrip(gathered(states))
    tails = []
    for rank in range(after[0]):
        rank_env(monkeypatch, rank, after[0])
        s, loader = make(ds, bs=after[1])
        s.load_state_dict(saved)
        tails += epoch0(s, loader)[0]
    assert rows(heads + tails) == want


def test_next_epoch_after_a_moved_resume_starts_fresh_and_draws_anew():
    first = epoch0(*make())[0]
    head, state = epoch0(*make(workers=0, bs=3), stop=2)
    s, loader = make(bs=2)
    s.load_state_dict(state)
    epoch0(s, loader)
    s.reseed(1, 1)
    second = [flat(b) for b in loader]
    assert rows(second) != rows(first) and [r[:2] for r in rows(second)] == [
        r[:2] for r in rows(first)
    ]


def test_persistent_workers_follow_epochs_and_resume_bitwise():
    def run(stop=None, state=None):
        s, loader = make(workers=2, persistent_workers=True)
        if state is not None:
            s.load_state_dict(state)
        out = []
        for epoch in range(2):
            s.reseed(1, epoch)
            for b in loader:
                out.append(flat(b))
                if len(out) == stop:
                    return out, roundtrip(s.state_dict())
        return out, None

    want, _ = run()
    half = len(want) // 2
    assert rows(want[:half]) != rows(want[half:])
    assert [r[:2] for r in rows(want[:half])] == [r[:2] for r in rows(want[half:])]
    head, state = run(stop=3)
    assert head + run(state=state)[0] == want


def test_a_gathered_state_loaded_before_the_loader_is_built_waits_for_it(monkeypatch):
    want = rows(epoch0(*make())[0])
    heads, states = [], []
    for rank in range(2):
        rank_env(monkeypatch, rank, 2)
        head, state = epoch0(*make(), stop=2)
        heads += head
        states.append(state)
    saved = roundtrip(gathered(states))
    tails = []
    for rank in range(3):
        rank_env(monkeypatch, rank, 3)
        s = Seeder()
        s.init(MASTER)
        s.load_state_dict(saved)  # no loader yet: its part waits for it
        loader = IterableDataLoader(Shards(), batch_size=3, seeder=s)
        tails += epoch0(s, loader)[0]
    assert rows(heads + tails) == want


def test_a_datasets_shuffle_buffer_by_shard_follows_the_epoch_and_resumes_in_it():
    pytest.importorskip("datasets")
    ds = lambda: hf_sharded(shuffle=True)  # noqa: E731

    def epoch1(s, loader, stop=None):
        s.reseed(1, 1)
        out = []
        for k, b in enumerate(loader, 1):
            out.append(flat(b))
            if k == stop:
                return out, roundtrip(s.state_dict())
        return out, None

    s, loader = make(ds, by_shard=True)
    first = epoch0(s, loader)[0]
    second = epoch1(s, loader)[0]
    order = lambda batches: [x for b in batches for x in b["x"]]  # noqa: E731
    assert order(first) != order(second) and sorted(order(first)) == sorted(order(second))
    head, state = epoch1(*make(ds, by_shard=True), stop=3)
    s, loader = make(ds, workers=2, bs=2, by_shard=True)
    s.load_state_dict(state)
    assert rows(head + epoch1(s, loader)[0]) == rows(second)


def plain_hf(shuffle=False):
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"x": list(range(24))}).to_iterable_dataset(num_shards=8)
    if shuffle:
        ds = ds.shuffle(seed=3, buffer_size=1, max_buffer_input_shards=1)
    return ds.with_format("torch")


@pytest.mark.parametrize("kind", [{}, {"shuffle": True}])
def test_a_datasets_stream_by_shard_reads_its_shards_in_datasets_own_order_every_epoch(kind):
    """datasets shuffles its shards anew every epoch past 0 (``default_rng(epoch)``): one process
    reads them in datasets' own order, and a stop inside epoch 1 resumed on another worker count
    reads every example of that order once."""
    pytest.importorskip("datasets")
    s, loader = make(lambda: plain_hf(**kind), bs=5, by_shard=True)
    own = plain_hf(**kind)
    for epoch in range(3):
        s.reseed(1, epoch)
        got = [x for b in loader for x in b["x"].tolist()]
        own.set_epoch(epoch)
        assert got == [int(r["x"]) for r in own], epoch
    s, loader = make(lambda: plain_hf(**kind), bs=5, by_shard=True)
    s.reseed(1, 1)
    it = iter(loader)
    head = [x for _ in range(2) for x in next(it)["x"].tolist()]
    state = roundtrip(s.state_dict())
    again, other = make(lambda: plain_hf(**kind), workers=2, bs=3, by_shard=True)
    again.load_state_dict(state)
    again.reseed(1, 1)
    tail = [x for b in other for x in b["x"].tolist()]
    own.set_epoch(1)
    want = [int(r["x"]) for r in own]
    assert head == want[:10] and sorted(head + tail) == sorted(want)


def test_a_datasets_stream_of_several_sources_is_dealt_in_its_shard_order_logged(caplog):
    datasets = pytest.importorskip("datasets")
    both = datasets.concatenate_datasets([plain_hf(), plain_hf()])
    s, loader = make(lambda: both, bs=7, by_shard=True)
    with caplog.at_level(logging.INFO, logger="seeder"):
        s.reseed(1, 1)
        got = [x for b in loader for x in b["x"].tolist()]
    assert got == list(range(24)) * 2
    assert "dealt in the order 0..15 every epoch" in caplog.text


def test_persistent_workers_deal_a_datasets_stream_in_each_epochs_own_order():
    """Persistent workers start later epochs by themselves: they deal datasets' order of the epoch
    as the main process does (the batches of workers started anew each epoch)."""
    pytest.importorskip("datasets")

    def epochs(persistent):
        s, loader = make(plain_hf, workers=2, bs=4, by_shard=True, persistent_workers=persistent)
        out = []
        for epoch in range(3):
            s.reseed(1, epoch)
            out.append([x for b in loader for x in b["x"].tolist()])
        return out

    fresh = epochs(False)
    assert epochs(True) == fresh and fresh[1] != fresh[2]
