"""seeder.data.Mix: which source gives position k is a pure function of (master seed, epoch, k,
weights); shares per block; each source in its order, its next passes reshuffled, nothing repeated
within a pass; weights changed at a position; bad weights refused. Read by seeder.DataLoader
(bitwise resume, workers) and by seeder.ElasticDataLoader across a world-size change (ranks in one
process, their states gathered by hand as ``seeder.gather_state_dict()`` does).
"""

from __future__ import annotations

import io
import logging
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seeder
from seeder import Seeder
from seeder.data import Mix
from seeder.data._mix_weights import BLOCK

A, B = 300, 40  # a large source and a small one, upsampled: several passes


def sources():
    return {"web": torch.arange(A), "code": 10_000 + torch.arange(B)}


def mix_for(weights, master=3, epoch=0, **kw):
    s = Seeder()
    s.init(master)
    s.reseed(1, epoch)
    return Mix(sources(), weights=weights, seeder=s, **kw), s


def trail(mix, n):
    return [mix.locate(k) for k in range(n)]


@settings(max_examples=30, deadline=None)
@given(
    w=st.lists(st.floats(0.01, 100), min_size=2, max_size=2),
    n=st.integers(1, 5 * BLOCK),
)
def test_every_prefix_holds_each_sources_share_within_one_block(w, n):
    mix, _ = mix_for({"web": w[0], "code": w[1]})
    names = [name for name, _ in trail(mix, n)]
    for name, weight in zip(("web", "code"), w):
        share = weight / sum(w)
        # each whole block within one position of its share, the partial one within its size
        assert abs(names.count(name) - n * share) <= BLOCK * share + 2 + n // BLOCK
    full = (n // BLOCK) * BLOCK  # whole blocks: the quota exactly
    q = mix.quotas[0]
    assert names[:full].count("web") == (n // BLOCK) * q[0]


def test_a_source_gives_its_items_in_order_then_reshuffled_passes_without_repeats():
    mix, _ = mix_for({"web": 1, "code": 1}, length=2 * BLOCK)
    code = [i for name, i in trail(mix, 2 * BLOCK) if name == "code"]
    assert code[:B] == list(range(B))  # the source's own order first
    passes = [code[p : p + B] for p in range(0, len(code) - B + 1, B)]
    assert len(passes) >= 3
    for p in passes:
        assert sorted(p) == list(range(B))  # each pass: every item once
    assert passes[1] != passes[2] and passes[1] != list(range(B))


def test_the_mix_is_a_pure_function_of_master_epoch_position_and_weights():
    w = {"web": 0.7, "code": 0.3}
    first = trail(mix_for(w)[0], 3000)
    assert trail(mix_for(w)[0], 3000) == first
    assert trail(mix_for(w, epoch=1)[0], 3000) != first
    assert trail(mix_for(w, master=4)[0], 3000) != first
    mix, s = mix_for(w)
    s.reseed(1, 1)  # the mix follows the seeder's epochs
    assert trail(mix, 3000) == trail(mix_for(w, epoch=1)[0], 3000)


def test_changed_weights_keep_the_past_and_follow_the_new_shares_after(caplog):
    before, after, stop = {"web": 0.9, "code": 0.1}, {"web": 0.2, "code": 0.8}, 1500
    old = trail(mix_for(before)[0], 6000)
    with caplog.at_level(logging.INFO, logger="seeder"):
        changed, _ = mix_for([((0, 0), before), ((0, stop), after)])
    assert "positions from 1500 of epoch 0 on follow the weights" in caplog.text
    new = trail(changed, 6000)
    assert new[:stop] == old[:stop]
    later = [name for name, _ in new[stop:]]
    assert abs(later.count("code") / len(later) - 0.8) < 0.05
    code = [i for name, i in new if name == "code"]  # passes continue across the change
    for p in range(0, len(code) - B + 1, B):
        assert sorted(code[p : p + B]) == list(range(B))
    changed.set_epoch(1)  # later epochs follow the new weights from their start
    names = [name for name, _ in trail(changed, 4 * BLOCK)]
    assert names.count("code") == 4 * changed.quotas[1][1]


@pytest.mark.parametrize(
    "weights, words",
    [
        ({"web": -1, "code": 1}, "'web': -1"),
        ({"web": math.nan, "code": 1}, "'web': nan"),
        ({"web": 0, "code": 0.0}, "all 0"),
        ({"web": 1, "text": 1}, "no source named ['text']; no weight for ['code']"),
        ({"web": 1}, "no weight for ['code']"),
        ({"web": 1, "code": math.inf}, "'code': inf"),
    ],
)
def test_bad_weights_are_a_value_error_naming_them(weights, words):
    with pytest.raises(ValueError) as err:
        mix_for(weights)
    assert words in str(err.value)


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_dataloader_over_a_mix_resumes_bitwise_with_workers():
    def run(stop=None, state=None):
        s = Seeder()
        s.init(9)
        mix = Mix(sources(), weights={"web": 2, "code": 1}, length=60, seeder=s)
        loader = seeder.DataLoader(mix, batch_size=4, shuffle=False, num_workers=2, seeder=s)
        if state is not None:
            s.load_state_dict(state)
        out = []
        for epoch in range(2):
            s.reseed(1, epoch)
            for b in loader:
                out.append(b.tolist())
                if stop == len(out):
                    return out, roundtrip(s.state_dict())
        return out, None

    want, _ = run()
    assert want[:15] != want[15:]  # each epoch its own mix
    head, state = run(stop=6)
    tail, _ = run(state=state)
    assert head + tail == want[: len(head)] + want[len(head) :] and len(head + tail) == len(want)
    assert head + tail == want


def test_elastic_loader_over_a_mix_reads_every_position_once_across_a_world_change(monkeypatch):
    def ranks(world, bs, state=None, stop=None):
        got, states = [], []
        for rank in range(world):
            for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
                monkeypatch.setenv(k, str(v))
            s = Seeder()
            s.init(9)
            mix = Mix(sources(), weights={"web": 1, "code": 3}, length=64, seeder=s)
            loader = seeder.ElasticDataLoader(
                mix, batch_size=bs, shuffle=False, seeder=s, num_replicas=world, rank=rank
            )
            if state is not None:
                s.load_state_dict(state)
            s.reseed(1, 0)
            for k, b in enumerate(loader, 1):
                got += b.tolist()
                if k == stop:
                    break
            states.append(s.state_dict())
        return got, states

    want, _ = ranks(1, 8)
    assert len(want) == 64
    head, states = ranks(2, 4, stop=3)
    gathered = {"format": "seeder-gathered", "version": states[0]["version"]}
    gathered.update(world_size=2, ranks=states)
    tail, _ = ranks(4, 2, state=roundtrip(gathered))  # the same global batch
    assert sorted(head + tail) == sorted(want) and len(head) == 24


def test_a_billion_positions_deep_the_mix_answers_at_once():
    mix, _ = mix_for([((0, 0), {"web": 1, "code": 1}), ((0, 10**9), {"web": 1, "code": 3})])
    deep = [mix.locate(10**9 + k) for k in range(BLOCK)]
    assert [n for n, _ in deep].count("code") == 768
    counts = mix._base(1)
    assert counts.sum() == 10**9 and abs(int(counts[0]) - 5 * 10**8) <= BLOCK
    assert np.all(counts >= 0)


# ---------------------------------------------------------------- a mix of streams


class Tagged(torch.utils.data.IterableDataset):
    """A sharded stream whose rows say the source, shard and position, and what the row drew."""

    def __init__(self, tag, sizes):
        self.tag, self.sizes = tag, sizes

    @property
    def num_shards(self):
        return len(self.sizes)

    def iter_shard(self, shard, start):
        for pos in range(start, self.sizes[shard]):
            yield torch.tensor([self.tag, shard, pos, int(torch.randint(0, 10**6, ()))])

    def __iter__(self):
        for shard in range(self.num_shards):
            yield from self.iter_shard(shard, 0)


def stream_loader(workers=0, bs=4, weights=None, length=240):
    s = Seeder()
    s.init(5)
    streams = {"a": Tagged(0, [30, 20, 25, 40]), "b": Tagged(1, [5, 3, 4])}
    mix = Mix(streams, weights=weights or {"a": 3, "b": 1}, length=length, seeder=s)
    loader = seeder.IterableDataLoader(mix, batch_size=bs, num_workers=workers, seeder=s)
    return s, loader, mix


def stream_epoch(s, loader, epoch=0, stop=None):
    s.reseed(1, epoch)
    out = []
    for k, b in enumerate(loader, 1):
        out.append(b.tolist())
        if k == stop:
            return out, roundtrip(s.state_dict())
    return out, None


def as_rows(batches):
    return sorted(tuple(r) for b in batches for r in b)


def test_a_mix_of_streams_resumes_bitwise_and_on_other_worker_counts():
    want = stream_epoch(*stream_loader()[:2])[0]
    assert len(as_rows(want)) == 240
    for workers in (0, 2):
        same = stream_epoch(*stream_loader(workers)[:2])[0]
        assert as_rows(same) == as_rows(want)  # what a position gives and draws: any topology
        head, state = stream_epoch(*stream_loader(workers)[:2], stop=7)
        s, loader, _ = stream_loader(workers)
        s.load_state_dict(state)
        assert head + stream_epoch(s, loader)[0] == same  # bitwise
        s, loader, _ = stream_loader(2 - workers, bs=5)
        s.load_state_dict(state)
        assert as_rows(head + stream_epoch(s, loader)[0]) == as_rows(want)


def test_a_mix_of_streams_keeps_shares_per_lane_and_no_repeat_within_a_pass():
    s, loader, mix = stream_loader(length=3 * 2 * BLOCK)
    assert mix.lanes == 3
    s.reseed(1, 0)
    for lane in range(3):
        got = [r.tolist() for r in mix.iter_shard(lane, 0)]
        assert [r[0] for r in got].count(1) == 2 * mix.quotas[0][1]  # whole blocks: the quota
        b = [tuple(r[1:3]) for r in got if r[0] == 1]
        per_pass = [5, 3, 4][lane]  # source b's shard of this lane
        for p in range(0, len(b) - per_pass + 1, per_pass):
            assert sorted(b[p : p + per_pass]) == [(lane, i) for i in range(per_pass)]


def test_a_mix_of_streams_follows_new_weights_from_the_epoch_they_are_given(caplog):
    old = {"a": 3, "b": 1}
    new = {"a": 1, "b": 3}
    s, loader, _ = stream_loader(length=2400)
    first = stream_epoch(s, loader)[0]
    with caplog.at_level(logging.INFO, logger="seeder"):
        s2, loader2, _ = stream_loader(weights=[((0, 0), old), ((1, 0), new)], length=2400)
    assert "positions from 0 of epoch 1 on follow the weights" in caplog.text
    assert stream_epoch(s2, loader2)[0] == first  # the past as it was
    later = as_rows(stream_epoch(s2, loader2, epoch=1)[0])
    assert abs(sum(r[0] == 1 for r in later) / len(later) - 0.75) < 0.05
    with pytest.raises(ValueError, match="at an epoch's start"):
        stream_loader(weights=[((0, 0), old), ((0, 100), new)])


def test_a_mix_of_streams_refuses_a_source_without_shards_and_needs_a_length():
    class Plain(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    s = Seeder()
    s.init(0)
    with pytest.raises(ValueError, match="'p' is a stream without shards"):
        Mix({"a": Tagged(0, [3]), "p": Plain()}, weights={"a": 1, "p": 1}, length=9, seeder=s)
    with pytest.raises(ValueError, match="length="):
        Mix({"a": Tagged(0, [3])}, weights={"a": 1}, seeder=s)
    with pytest.raises(ValueError, match="lanes must be"):
        Mix({"a": Tagged(0, [3])}, weights={"a": 1}, length=3, lanes=2, seeder=s)


def test_a_mix_of_streams_resumed_with_other_weights_is_refused_naming_the_history():
    old, new = {"a": 3, "b": 1}, {"a": 1, "b": 3}
    _, state1 = stream_epoch(*stream_loader(length=480)[:2], epoch=1, stop=3)
    s2, loader2, _ = stream_loader(weights=[((0, 0), old), ((1, 0), new)], length=480)
    before = loader2.state_dict()
    with pytest.raises(seeder.StateError, match=r"pass weights=\[\(\(0, 0\), \{'a': 3.0"):
        s2.load_state_dict(state1)  # a change in the saved epoch
    assert loader2.state_dict() == before
    _, state = stream_epoch(*stream_loader(length=480)[:2], stop=3)
    s3, loader3, _ = stream_loader(weights=new, length=480)
    with pytest.raises(seeder.StateError, match=r"pass weights=\[\(\(0, 0\), \{'a': 3.0"):
        loader3.load_state_dict(state["participants"]["loader.0"])  # the mix's part not loaded


def test_a_mix_of_streams_resumed_with_weights_for_the_next_epoch_keeps_this_one():
    old, new = {"a": 3, "b": 1}, {"a": 1, "b": 3}
    want = stream_epoch(*stream_loader(length=480)[:2])[0]
    head, state = stream_epoch(*stream_loader(length=480)[:2], stop=3)
    s, loader, _ = stream_loader(weights=[((0, 0), old), ((1, 0), new)], length=480)
    s.load_state_dict(state)
    assert head + stream_epoch(s, loader)[0] == want


def resume_run(weights, state=None, stop=None, build_after_load=False, shuffle=False):
    """A DataLoader over a mix: from the start, or from ``state`` (loaded before or after the
    loader is built), to batch ``stop`` (with the state there) or the epoch's end."""
    s = Seeder()
    s.init(9)
    mix = Mix(sources(), weights=weights, length=60, seeder=s)
    if state is not None and build_after_load:
        s.load_state_dict(state)
    loader = seeder.DataLoader(mix, batch_size=4, shuffle=shuffle, seeder=s)
    if state is not None and not build_after_load:
        s.load_state_dict(state)
    out = []
    for epoch in range(state["last_reseed"][1] if state is not None else 0, 2):
        s.reseed(1, epoch)
        for b in loader:
            out.append(b.tolist())
            if len(out) == stop:
                return out, roundtrip(s.state_dict()), mix
    return out, None, mix


OLD, NEW = {"web": 2, "code": 1}, {"web": 1, "code": 2}


@pytest.mark.parametrize("build_after_load", [False, True])
def test_a_mix_resumed_with_new_plain_weights_keeps_the_past_as_the_explicit_history(
    caplog, build_after_load
):
    head, state, _ = resume_run(OLD, stop=5)
    assert state["participants"]["mix.0"]["stop"] == [0, 20]  # 5 batches of 4
    history = [((0, 0), OLD), ((0, 20), NEW)]
    explicit = resume_run(history, state=state)[0]
    with caplog.at_level(logging.INFO, logger="seeder"):
        caplog.clear()
        plain, _, mix = resume_run(NEW, state=state, build_after_load=build_after_load)
    assert plain == explicit  # bitwise: both epochs
    assert head + plain != resume_run(OLD)[0]  # the new weights after the stop
    lines = [r.getMessage() for r in caplog.records if "resumed with the weights" in r.getMessage()]
    assert lines == [
        "seeder.data.Mix: resumed with the weights {'web': 1.0, 'code': 2.0} from position 20 of "
        "epoch 0 on (the checkpoint's: {'web': 2.0, 'code': 1.0}); the positions before stay as "
        "they were"
    ]
    assert mix.state_dict()["weights"] == [[0, 0, {"web": 2.0, "code": 1.0}], [0, 20, NEW]]


@settings(max_examples=12, deadline=None)
@given(
    stop=st.integers(1, 29),
    w=st.lists(st.integers(0, 5), min_size=2, max_size=2).filter(any),
)
def test_any_stop_and_new_weights_resume_as_the_history_changed_at_the_stop(stop, w):
    new = {"web": w[0], "code": w[1]}
    head, state, _ = resume_run(OLD, stop=stop)
    epoch, position = divmod(stop * 4, 60)  # 15 batches of 4 per epoch
    history = [((0, 0), OLD)] if new == OLD else [((0, 0), OLD), ((epoch, position), new)]
    if (epoch, position) == (0, 0):
        history = [((0, 0), new)]
    want = resume_run(history)[0]
    assert head + resume_run(new, state=state)[0] == want


def test_an_explicit_history_changing_the_weights_before_the_stop_is_refused():
    _, state, _ = resume_run(OLD, stop=5)  # stop at position 20 of epoch 0
    for at in (4, 12, 19):
        t = Seeder()
        t.init(9)
        mix = Mix(sources(), weights=[((0, 0), OLD), ((0, at), NEW)], length=60, seeder=t)
        seeder.DataLoader(mix, batch_size=4, seeder=t)
        before = mix.state_dict()
        with pytest.raises(seeder.StateError, match="before the checkpoint's stop"):
            t.load_state_dict(state)
        assert mix.state_dict() == before
    assert resume_run([((0, 0), OLD), ((0, 20), NEW)], state=state)[0]  # at the stop: loads


def test_a_mix_resumed_inside_a_later_epoch_reads_that_epochs_mix():
    full = resume_run(OLD)[0]
    head, state, _ = resume_run(OLD, stop=16)  # one batch into epoch 1
    tail, _, mix = resume_run(OLD, state=state)
    assert head + tail == full and mix.epoch == 1


def test_a_mix_resumed_twice_with_plain_weights_continues_its_history():
    third = {"web": 1, "code": 5}
    head, state, _ = resume_run(OLD, stop=5)
    middle, state2, _ = resume_run(NEW, state=state, stop=4)  # 4 more batches: position 36
    tail = resume_run(third, state=state2)[0]
    history = [((0, 0), OLD), ((0, 20), NEW), ((0, 36), third)]
    assert head + middle + tail == resume_run(history)[0]
    again = resume_run(NEW, state=state2)[0]  # the same weights again: nothing changes
    assert head + middle + again == resume_run([((0, 0), OLD), ((0, 20), NEW)])[0]


def test_a_mix_resumed_with_new_weights_at_an_epoch_end_follows_them_from_the_next_epoch():
    full = resume_run(OLD)[0]
    head, state, _ = resume_run(OLD, stop=15)  # the whole first epoch
    assert state["participants"]["mix.0"]["stop"] == [0, 60]
    tail = resume_run(NEW, state=state)[0]
    assert head + tail == resume_run([((0, 0), OLD), ((1, 0), NEW)])[0] != full


def test_elastic_loader_over_a_mix_takes_new_plain_weights_across_a_world_change(monkeypatch):
    def ranks(world, bs, weights, state=None, stop=None):
        got, states = [], []
        for rank in range(world):
            for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
                monkeypatch.setenv(k, str(v))
            s = Seeder()
            s.init(9)
            mix = Mix(sources(), weights=weights, length=64, seeder=s)
            loader = seeder.ElasticDataLoader(
                mix, batch_size=bs, shuffle=False, seeder=s, num_replicas=world, rank=rank
            )
            if state is not None:
                s.load_state_dict(state)
            s.reseed(1, 0)
            for k, b in enumerate(loader, 1):
                got.append(b.tolist())
                if k == stop:
                    break
            states.append(s.state_dict())
        return got, states

    old, new = {"web": 1, "code": 3}, {"web": 3, "code": 1}
    _, states = ranks(2, 4, old, stop=3)  # 3 global steps of 8: position 24
    assert states[0]["participants"]["mix.0"]["stop"] == [0, 24]
    gathered = {"format": "seeder-gathered", "version": states[0]["version"]}
    gathered.update(world_size=2, ranks=states)
    plain = ranks(4, 2, new, state=roundtrip(gathered))[0]
    explicit = ranks(4, 2, [((0, 0), old), ((0, 24), new)], state=roundtrip(gathered))[0]
    assert plain == explicit and len(plain) == 4 * 5  # 40 positions left over 4 ranks


def test_a_mix_resumed_with_other_weights_and_no_stop_is_refused_naming_the_history():
    s = Seeder()
    s.init(9)
    s.reseed(1, 0)
    kept = Mix(sources(), weights=OLD, length=60, seeder=s)  # no loader reads it
    no_loader = roundtrip(s.state_dict())
    assert no_loader["participants"]["mix.0"]["stop"] is None and kept.reader_stop() is None
    shuffled = resume_run(OLD, stop=2, shuffle=True)[1]  # positions read out of order
    assert shuffled["participants"]["mix.0"]["stop"] is None
    version1 = resume_run(OLD, stop=2)[1]
    del version1["participants"]["mix.0"]["stop"]
    version1["participants"]["mix.0"]["version"] = 1
    for state, shuffle in ((no_loader, False), (shuffled, True), (version1, False)):
        t = Seeder()
        t.init(9)
        mix = Mix(sources(), weights=NEW, length=60, seeder=t)
        seeder.DataLoader(mix, batch_size=4, shuffle=shuffle, seeder=t)
        before = mix.state_dict()
        with pytest.raises(seeder.StateError) as err:
            t.load_state_dict(state)
        assert "no loader read the mix in order" in str(err.value)
        assert "pass weights=[((0, 0), {'web': 2.0, 'code': 1.0})] + [((E, P)" in str(err.value)
        assert mix.state_dict() == before
    assert resume_run(OLD, state=version1)[0]  # the same weights: a version 1 state loads


@pytest.mark.parametrize(
    "weights",
    [
        [[0, 5, {"web": 2.0, "code": 1.0}]],
        [[0, 0, {"web": -1.0, "code": 1.0}]],
        [[0, 0, {"web": 2.0}]],
        [[0, 0, {"web": 2.0, "code": 1.0}], [0, 0, {"web": 1.0, "code": 1.0}]],
        "2:1",
        ("stop", [1, 8]),
        ("stop", [0, 61]),
    ],
)
def test_a_mix_state_with_corrupt_weights_is_refused_before_anything_changes(weights):
    state = resume_run(OLD, stop=2)[1]
    key, value = weights if isinstance(weights, tuple) else ("weights", weights)
    state["participants"]["mix.0"][key] = value
    t = Seeder()
    t.init(9)
    mix = Mix(sources(), weights=NEW, length=60, seeder=t)
    seeder.DataLoader(mix, batch_size=4, shuffle=False, seeder=t)
    with pytest.raises(seeder.StateError, match="corrupt"):
        t.load_state_dict(state)
    assert mix.state_dict()["weights"] == [[0, 0, NEW]]


def test_a_mix_of_streams_moves_to_another_world_size_every_position_once(monkeypatch):
    def on(rank, world):
        for k, v in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
            monkeypatch.setenv(k, str(v))
        return stream_loader()

    s, loader, _ = on(0, 1)
    want = as_rows(stream_epoch(s, loader)[0])
    heads, states = [], []
    for rank in range(2):
        s, loader, _ = on(rank, 2)
        head, state = stream_epoch(s, loader, stop=5)
        heads += head
        states.append(state)
    assert list(states[0]["participants"]) == ["mix.0", "loader.0"]
    gathered = {"format": "seeder-gathered", "version": states[0]["version"]}
    gathered.update(world_size=2, ranks=states)
    tails = []
    for rank in range(3):
        s, loader, _ = on(rank, 3)
        s.load_state_dict(roundtrip(gathered))
        tails += stream_epoch(s, loader)[0]
    assert as_rows(heads + tails) == want


def test_per_rank_loaders_over_a_mix_stop_at_their_interleaved_global_position(monkeypatch):
    def ranks(weights, state=None, stop=None):
        got, states = [], []
        for rank in range(2):
            for k, v in (("RANK", rank), ("WORLD_SIZE", 2), ("LOCAL_RANK", rank)):
                monkeypatch.setenv(k, str(v))
            s = Seeder()
            s.init(9)
            mix = Mix(sources(), weights=weights, length=64, seeder=s)
            sampler = seeder.DistributedSampler(
                mix, num_replicas=2, rank=rank, shuffle=False, seeder=s
            )
            loader = seeder.DataLoader(mix, batch_size=4, sampler=sampler, seeder=s)
            if state is not None:
                s.load_state_dict(state[rank])
            s.reseed(1, 0)
            for k, b in enumerate(loader, 1):
                got.append(b.tolist())
                if k == stop:
                    break
            states.append(roundtrip(s.state_dict()))
        return got, states

    old, new = {"web": 1, "code": 3}, {"web": 3, "code": 1}
    _, states = ranks(old, stop=3)  # each rank 12 samples of positions 0, 2, ... / 1, 3, ...
    assert [st["participants"]["mix.0"]["stop"] for st in states] == [[0, 24], [0, 24]]
    assert ranks(new, state=states)[0] == ranks([((0, 0), old), ((0, 24), new)], state=states)[0]


class Refusing:
    """A participant whose state checks but does not load: the load after the mix's fails."""

    seeder_kind = "refusing"

    def seeder_reseed(self, seeder, task_id, epoch):
        pass

    def state_dict(self):
        return {"n": 0}

    def check_state_dict(self, state):
        pass

    def load_state_dict(self, state):
        raise ValueError("disk gone")


def test_a_load_failing_after_the_mix_resumed_puts_its_weights_and_epoch_back():
    s = Seeder()
    s.init(9)
    mix = Mix(sources(), weights=OLD, length=60, seeder=s)
    loader = seeder.DataLoader(mix, batch_size=4, shuffle=False, seeder=s)
    refusing = Refusing()
    s.join(refusing)
    for epoch in range(2):
        s.reseed(1, epoch)
        it = iter(loader)
        next(it)
    state = roundtrip(s.state_dict())  # epoch 1, position 4
    t = Seeder()
    t.init(9)
    mix2 = Mix(sources(), weights=NEW, length=60, seeder=t)
    seeder.DataLoader(mix2, batch_size=4, shuffle=False, seeder=t)
    t.join(refusing)
    before = mix2.state_dict()
    with pytest.raises(seeder.StateError, match="disk gone"):
        t.load_state_dict(state)
    assert mix2.state_dict() == before and mix2.epoch == 0
