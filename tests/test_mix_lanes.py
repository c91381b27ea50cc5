"""A mix of streams resumed with other weights: the new weights from each lane's stop.

The lanes of a ``seeder.data.Mix`` of streams stop at their own positions; a resume with other
plain weights keeps every lane's positions before its stop as they were and follows the new
weights from there, on the same topology (bitwise with the run given that history) and on
another one (every position once), and a later resume replays the change.
"""

from __future__ import annotations

import io
import logging
import re
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mix import Tagged  # a sharded stream whose rows say source, shard, position, draw

import seeder
from seeder import Seeder
from seeder.data import Mix

OLD, NEW = {"a": 3.0, "b": 1.0}, {"a": 1.0, "b": 3.0}
LANES = 3


def sources():
    return {"a": Tagged(0, [30, 20, 25, 40]), "b": Tagged(1, [5, 3, 4])}  # 3 lanes


def build(weights, workers=0, bs=4, length=240):
    s = Seeder()
    s.init(5)
    mix = Mix(sources(), weights=weights, length=length, seeder=s)
    loader = seeder.IterableDataLoader(mix, batch_size=bs, num_workers=workers, seeder=s)
    return s, loader, mix


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def run(s, loader, epoch=0, stop=None):
    """The rows of ``epoch`` up to batch ``stop`` (with the state there), or to its end."""
    s.reseed(1, epoch)
    rows = []
    for k, batch in enumerate(loader, 1):
        rows += [tuple(r) for r in batch.tolist()]
        if k == stop:
            return rows, roundtrip(s.state_dict())
    return rows, None


def by_lane(rows):
    """Each lane's rows in the order read (a lane is read in order by one process at a time)."""
    lanes = {lane: [] for lane in range(LANES)}
    for row in rows:
        lanes[row[1] % LANES].append(row)
    return lanes


def stops(head):
    """Where each lane stood after ``head``: its rows handed out."""
    return [len(rows) for rows in by_lane(head).values()]


def on(monkeypatch, rank, world):
    for key, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", rank)):
        monkeypatch.setenv(key, str(value))


def gathered(states):
    return roundtrip(
        {
            "format": "seeder-gathered",
            "version": states[0]["version"],
            "world_size": len(states),
            "ranks": states,
        }
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_new_plain_weights_start_at_each_lanes_stop_bitwise_on_the_same_topology(workers, caplog):
    old_run = run(*build(OLD, workers)[:2])[0]
    head, state = run(*build(OLD, workers)[:2], stop=9)
    at = stops(head)
    assert len(set(at)) > 1  # the lanes stop at their own positions
    s, loader, mix = build(NEW, workers)
    with caplog.at_level(logging.INFO, logger="seeder"):
        s.load_state_dict(state)
    tail = run(s, loader)[0]
    assert mix.state_dict()["weights"] == [[0, 0, OLD], [0, at, NEW]]
    assert mix.state_dict()["version"] == 3
    lines = [r.getMessage() for r in caplog.records if "resumed with the weights" in r.msg]
    assert lines == [
        f"seeder.data.Mix: resumed with the weights {NEW} in epoch 0 from each lane's stop, "
        f"lane positions {at} (per lane) (the checkpoint's: {OLD} before it); the positions "
        "before stay as they were"
    ]
    then = run(s, loader, epoch=1)[0]
    planned = [((0, 0), OLD), ((0, dict(enumerate(at))), NEW)]
    s2, loader2, _ = build(planned, workers)
    assert head + tail == run(s2, loader2)[0]  # bitwise, order included
    assert then == run(s2, loader2, epoch=1)[0]
    before, after = by_lane(old_run), by_lane(head + tail)
    for lane in range(LANES):
        assert after[lane][: at[lane]] == before[lane][: at[lane]]  # the past as it was
    assert sum(r[0] == 1 for r in then) / len(then) > 0.6  # NEW upweights b


def test_a_stop_on_one_topology_takes_new_weights_at_each_lanes_stop_on_another(monkeypatch):
    heads, states = [], []
    for rank in range(2):  # 2 ranks x 2 workers, old weights
        on(monkeypatch, rank, 2)
        head, state = run(*build(OLD, workers=2)[:2], stop=4)
        heads += head
        states.append(state)
    at = stops(heads)
    middle, later = [], []
    for rank in range(3):  # 3 x 1, new plain weights, stopped again
        on(monkeypatch, rank, 3)
        s, loader, mix = build(NEW, workers=1, bs=3)
        s.load_state_dict(gathered(states))
        assert mix.state_dict()["weights"] == [[0, 0, OLD], [0, at, NEW]]
        rows, state = run(s, loader, stop=6)
        middle += rows
        later.append(state)
    on(monkeypatch, 0, 1)
    s, loader, mix = build(NEW)  # 1 x 0: the change replays from the state
    s.load_state_dict(gathered(later))
    assert mix.state_dict()["weights"] == [[0, 0, OLD], [0, at, NEW]]
    rest = run(s, loader)[0]
    want = run(*build([((0, 0), OLD), ((0, at), NEW)])[:2])[0]
    assert sorted(heads + middle + rest) == sorted(want)  # every position once, same draws
    before, after = by_lane(run(*build(OLD)[:2])[0]), by_lane(heads + middle + rest)
    for lane in range(LANES):
        assert after[lane][: at[lane]] == before[lane][: at[lane]]
        assert sorted(after[lane]) == sorted(by_lane(want)[lane])


def test_a_gathered_state_on_the_same_world_size_takes_new_weights_at_each_lanes_stop_bitwise(
    monkeypatch,
):
    heads, states = [], []
    for rank in range(2):
        on(monkeypatch, rank, 2)
        head, state = run(*build(OLD, workers=2)[:2], stop=4)
        heads.append(head)
        states.append(state)
    at = stops(heads[0] + heads[1])
    for rank in range(2):
        on(monkeypatch, rank, 2)
        s, loader, mix = build(NEW, workers=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s.load_state_dict(gathered(states))
        assert mix.state_dict()["weights"] == [[0, 0, OLD], [0, at, NEW]]
        tail = run(s, loader)[0]
        again = build([((0, 0), OLD), ((0, at), NEW)], workers=2)
        assert heads[rank] + tail == run(*again[:2])[0]  # bitwise, this rank's order included


def test_one_ranks_state_of_several_takes_new_weights_from_the_next_epoch_loudly(monkeypatch):
    states = []
    for rank in range(2):
        on(monkeypatch, rank, 2)
        states.append(run(*build(OLD)[:2], stop=4)[1])
    for rank in range(2):
        on(monkeypatch, rank, 2)
        s, loader, mix = build(NEW)
        with pytest.warns(seeder.SeederWarning, match="gather_state_dict"):
            s.load_state_dict(states[rank])
        assert mix.state_dict()["weights"] == [[0, 0, OLD], [1, 0, NEW]]


def test_explicit_per_lane_changes_are_checked_against_the_lanes():
    end = [((0, 0), OLD), ((0, {0: 81, 1: 0, 2: 0}), NEW)]
    with pytest.raises(ValueError, match=r"past the lanes' ends \(\[80, 80, 80\]"):
        build(end)
    with pytest.raises(ValueError, match=r"for each lane 0\.\.2"):
        build([((0, 0), OLD), ((0, [4, 5]), NEW)])
    with pytest.raises(ValueError, match="names each lane 0, 1, ... once"):
        build([((0, 0), OLD), ((0, {0: 4, 2: 5}), NEW)])
    with pytest.raises(ValueError, match="no lane earlier|must start at"):
        build([((0, 0), OLD), ((0, [4, 5, 6]), NEW), ((0, [5, 4, 6]), OLD)])
    s = Seeder()
    s.init(0)
    with pytest.raises(ValueError, match="map-style sources have one order"):
        Mix({"a": torch.arange(4)}, weights=[((0, 0), {"a": 1}), ((0, [1, 2]), {"a": 2})], seeder=s)


def test_an_explicit_change_before_a_lanes_stop_is_refused_naming_the_stops():
    head, state = run(*build(OLD)[:2], stop=9)
    at = stops(head)
    early = [min(a, 1) for a in at]
    s, loader, mix = build([((0, 0), OLD), ((0, early), NEW)])
    before = (loader.state_dict(), mix.state_dict())
    hint = re.escape(f"each lane's stop in epoch 0 on, + [((0, {at}), new weights)]")
    with pytest.raises(seeder.StateError, match=hint):
        s.load_state_dict(state)
    assert (loader.state_dict(), mix.state_dict()) == before
    s, loader, _ = build([((0, 0), OLD), ((0, at), NEW)])  # the stops themselves: planned
    s.load_state_dict(state)
    assert head + run(s, loader)[0] == run(*build([((0, 0), OLD), ((0, at), NEW)])[:2])[0]


def test_a_mix_state_of_the_version_before_still_loads():
    head, state = run(*build(OLD)[:2], stop=5)
    state["participants"]["mix.0"]["version"] = 2
    s, loader, mix = build(NEW)
    s.load_state_dict(state)
    assert mix.state_dict()["weights"] == [[0, 0, OLD], [0, stops(head), NEW]]


WEIGHTS = st.fixed_dictionaries({"a": st.integers(0, 4), "b": st.integers(1, 4)}).map(
    lambda w: {k: float(v) for k, v in w.items()}
)


@settings(max_examples=12, deadline=None)
@given(stop=st.integers(1, 29), old=WEIGHTS, new=WEIGHTS)
def test_any_stop_keeps_each_lanes_past_and_follows_the_new_weights_after(stop, old, new):
    length = 120  # 3 lanes of 40, 30 batches of 4
    uninterrupted = by_lane(run(*build(old, length=length)[:2], epoch=1)[0])
    head, state = run(*build(old, length=length)[:2], epoch=1, stop=stop)
    at = stops(head)
    s, loader, mix = build(new, length=length)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every lane's stop is known: no fallback
        s.load_state_dict(state)
    tail = run(s, loader, epoch=1)[0]
    resumed = by_lane(head + tail)
    fresh = Mix(sources(), weights=[((0, 0), old), ((1, 0), new)], length=length, seeder=s)
    fresh.set_epoch(1)  # the new weights' choice from a lane's start
    for lane in range(LANES):
        assert resumed[lane][: at[lane]] == uninterrupted[lane][: at[lane]]
    if old == new:
        assert resumed == uninterrupted
        return
    assert mix.state_dict()["weights"][-1] == [1, at, new]
    for lane in range(LANES):
        choice = [int(r[0]) for r in fresh.iter_shard(lane, 0)]
        assert [r[0] for r in resumed[lane][at[lane] :]] == choice[: 40 - at[lane]]


def test_a_second_resume_in_the_same_epoch_with_other_weights_keeps_both_changes():
    third = {"a": 1.0, "b": 1.0}
    head, state = run(*build(OLD)[:2], stop=4)
    first = stops(head)
    s, loader, _ = build(NEW)
    s.load_state_dict(state)
    middle, state = run(s, loader, stop=5)
    second = stops(head + middle)
    s, loader, mix = build(third)
    s.load_state_dict(state)
    tail = run(s, loader)[0]
    history = [[0, 0, OLD], [0, first, NEW], [0, second, third]]
    assert mix.state_dict()["weights"] == history
    explicit = build([((0, 0), OLD), ((0, first), NEW), ((0, second), third)])
    assert head + middle + tail == run(*explicit[:2])[0]


def test_a_loader_state_with_a_lane_past_its_end_is_refused_before_anything_changes():
    _, state = run(*build(OLD)[:2], stop=5)
    state["participants"]["loader.0"]["workers"][0]["state"]["pos"] = 999
    s, loader, mix = build(NEW)
    before = (loader.state_dict(), mix.state_dict())
    with pytest.raises(seeder.StateError, match="past their ends"):
        s.load_state_dict(state)
    assert (loader.state_dict(), mix.state_dict()) == before
