"""seeder.IterableDataLoader states are checked whole; a refusal changes nothing; nothing spins.

Real streams (tests/scripts/stream_common.py: ``Noisy`` is replayed, ``Counted`` loads its own
state, a ``datasets`` stream), real workers. A state taken after 3 of the 8 batches of epoch 0 is
corrupted one field at a time (by hand and by hypothesis) and loaded into a fresh run: it is refused
with a ``StateError`` that leaves the loader's and the seeder's state as they were, or it resumes
bit for bit, or (a dataset state the dataset itself takes but cannot use) the first batch raises a
``StateError`` naming it. Never a silent other epoch, a crash inside the dataset, or a hang.
"""

from __future__ import annotations

import functools
import io
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seeder
from seeder import IterableDataLoader, Seeder, StateError

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from stream_common import Counted, Noisy, flat, hf_stream  # noqa: E402

MASTER, BS, N, STOP = 11, 3, 23, 3  # 2 workers: 4 batches each, 8 an epoch; the state after batch 3


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def canon(obj):
    """A state as plain comparable values (tensors and arrays as their dtype and numbers)."""
    if isinstance(obj, dict):
        return {k: canon(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [canon(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), obj.tolist())
    if hasattr(obj, "tolist"):
        return ("array", str(getattr(obj, "dtype", "")), obj.tolist())
    return obj


def build(kind, workers, master=MASTER):
    s = Seeder()
    s.init(master)
    return s, IterableDataLoader(kind(N), batch_size=BS, num_workers=workers, seeder=s)


@functools.cache
def reference(kind, workers):
    """(batches of epochs 0 and 1 after the stop, seeder.state_dict() after STOP batches)."""
    s, loader = build(kind, workers)
    out, saved = [], None
    for epoch in (0, 1):
        s.reseed(1, epoch)
        for batch in loader:
            out.append(flat(batch))
            if epoch == 0 and len(out) == STOP:
                saved = roundtrip(s.state_dict())
    return out[STOP:], saved


def resume(kind, workers, state):
    """A fresh run loads ``state`` (a seeder state) and runs to the end of epoch 1: its batches."""
    s, loader = build(kind, workers)
    s.load_state_dict(state)
    out = []
    for epoch in (0, 1):
        s.reseed(1, epoch)
        out.extend(flat(b) for b in loader)
    return out


def with_loader(state, **changes):
    """``state`` with the loader's entry changed: its keys, or ``worker<i>=dict(...)`` fields."""
    part = dict(state["participants"]["loader.0"])
    part["workers"] = [dict(r) for r in part["workers"]]
    for key, value in changes.items():
        if key.startswith("worker"):
            part["workers"][int(key[6:])].update(value)
        else:
            part[key] = value
    return {**state, "participants": {**state["participants"], "loader.0": part}}


def refused(kind, workers, state, match):
    """Load ``state`` into a fresh run: a StateError matching ``match``, and nothing changed."""
    s, loader = build(kind, workers)
    s.reseed(1, 0)
    before, run_before = loader.state_dict(), canon(s.state_dict())
    with pytest.raises(StateError, match=match):
        s.load_state_dict(state)
    with pytest.raises(StateError, match=match):
        loader.load_state_dict(state["participants"]["loader.0"])
    assert loader.state_dict() == before and canon(s.state_dict()) == run_before


# ----------------------------------------------------------------------------------- live iterators
@pytest.mark.parametrize("workers", [0, 2])
def test_a_load_refuses_the_iterator_started_before_it(workers):
    """The stale ``next`` raises (as the map-style loader's does) instead of yielding batch 3,
    draws nothing (no registered generator reseeded), and a new ``iter`` continues from the
    loaded position."""
    runs = []
    for _ in range(2):
        s, loader = build(Noisy, workers)
        calls = []
        s.register_generator(calls.append)
        s.reseed(1, 0)
        runs.append((s, loader, calls))
    want = [flat(b) for b in runs[0][1]]
    s, loader, calls = runs[1]
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    next(it), next(it)
    loader.load_state_dict(state)
    drawn = len(calls)
    with pytest.raises(RuntimeError, match="started before loader.load_state_dict"):
        next(it)
    assert len(calls) == drawn
    assert [flat(b) for b in loader] == want[1:]


def test_an_iterator_of_before_a_new_iter_goes_on_without_moving_the_position():
    """Not a load: an older iterator still yields (as torch's would); only the newest moves."""
    s, loader = build(Noisy, 0)
    s.reseed(1, 0)
    old = iter(loader)
    next(old)
    new = iter(loader)
    next(new), next(old)
    assert loader.state_dict()["batch"] == 1


# ------------------------------------------------------------------------------------------- states
@pytest.mark.parametrize("workers", [0, 2])
def test_every_worker_done_without_complete_is_refused_and_cannot_spin(workers):
    _, saved = reference(Counted, workers)
    done = {f"worker{w}": {"done": True} for w in range(max(workers, 1))}
    refused(
        Counted,
        workers,
        with_loader(saved, **done),
        r"'complete'\] is False, but every worker is exhausted",
    )


# name: (changes to the loader's entry in the state after batch 3 of 2 workers, what the error says)
def test_the_hand_out_loop_is_bounded_whatever_position_it_is_given():
    """Behind the load's check, the iterator itself refuses to spin on a position whose workers are
    all exhausted but whose epoch is not complete (it raises instead of skipping them forever)."""
    from seeder.data._stream_iter import StreamIter

    s, loader = build(Noisy, 2)
    progress = {
        "epoch": 0,
        "batch": 0,
        "next_worker": 0,
        "complete": False,
        "workers": [{"produced": 0, "state": None, "done": True}] * 2,
    }
    it = StreamIter(loader, iter([]), progress, object())
    assert it.exhausted()
    with pytest.raises(RuntimeError, match="every worker of epoch 0 is exhausted"):
        next(it)


BAD = {
    "batch=-5": ({"batch": -5}, r"'batch'\] is -5, but its workers produced 3"),
    "batch=99": ({"batch": 99}, r"'batch'\] is 99, but its workers produced 3"),
    "produced=3 with batch=1": (
        {"batch": 1, "worker0": {"produced": 3}},
        r"'batch'\] is 1, but its workers produced 4",
    ),
    "complete with work left": (
        {"complete": True},
        r"'complete'\] is True, but not every worker is exhausted",
    ),
    "another epoch": ({"epoch": 1}, r"in epoch 1 but the run's last reseed is epoch 0"),
    "next_worker off the round robin": ({"next_worker": 0}, "no position of the round robin"),
    "exhausted worker ahead": ({"worker1": {"done": True}}, "no position of the round robin"),
    "a record short": ({"worker0": {"done": "no"}}, r"worker 0's 'done' must be True or False"),
    "negative produced": ({"worker1": {"produced": -1}}, r"worker 1's 'produced' must be an int"),
    "garbage dataset state": (
        {"worker0": {"state": {"nope": 1}}},
        r"worker 0's saved dataset state .* does not load into Counted "
        r"\(KeyError: 'pos'\)",
    ),
    "dataset state of a list": (
        {"worker0": {"state": [1, 2]}},
        r"does not load into Counted \(TypeError",
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_an_inconsistent_state_is_refused_with_what_is_wrong_and_nothing_changes(name):
    changes, match = BAD[name]
    _, saved = reference(Counted, 2)
    refused(Counted, 2, with_loader(saved, **changes), match)


def test_a_worker_count_mismatch_in_the_records_is_refused():
    _, saved = reference(Counted, 2)
    entry = saved["participants"]["loader.0"]
    part = dict(entry, workers=entry["workers"][:1])
    refused(
        Counted,
        2,
        {**saved, "participants": {**saved["participants"], "loader.0": part}},
        r"one record per worker \(2\), got 1",
    )


def test_a_dataset_state_for_a_dataset_without_state_is_refused():
    _, saved = reference(Noisy, 2)
    refused(Noisy, 2, with_loader(saved, worker0={"state": {"pos": 6}}), "Noisy has no state_dict")


def test_a_dataset_that_checks_its_own_state_decides():
    class Checked(Counted):
        def check_state_dict(self, state):
            if not isinstance(state.get("pos"), int):
                raise StateError(f"Checked: pos must be an int, got {state.get('pos')!r}")

    _, saved = reference(Counted, 0)
    refused(
        Checked,
        0,
        with_loader(saved, worker0={"state": {"pos": "6"}}),
        "pos must be an int, got '6'",
    )
    assert resume(Checked, 0, saved) == reference(Counted, 0)[0]


def test_a_dataset_state_the_dataset_takes_but_cannot_use_raises_at_the_first_batch_naming_it():
    """Counted keeps whatever it loads: a string position passes the load into a copy and fails
    in the worker."""
    _, saved = reference(Counted, 2)
    s, loader = build(Counted, 2)
    s.load_state_dict(with_loader(saved, worker0={"state": {"pos": "six"}}))
    match = r"worker 0's Counted raised TypeError.* resuming from its saved dataset state"
    with pytest.raises(StateError, match=match):
        list(loader)


def test_a_replay_that_runs_out_raises_instead_of_ending_the_epoch_early():
    """The state says worker 0 produced 4 batches; this dataset yields 2 per worker: the resume
    cannot be exact."""
    _, saved = reference(Noisy, 2)
    s = Seeder()
    s.init(MASTER)
    loader = IterableDataLoader(Noisy(12), batch_size=BS, num_workers=2, seeder=s)
    s.load_state_dict(
        with_loader(saved, batch=7, next_worker=1, worker0={"produced": 4}, worker1={"produced": 3})
    )
    with pytest.raises(StateError, match="worker 0 ran out after 2 of the 4 batches"):
        list(loader)


def test_a_datasets_state_of_another_epoch_is_refused():
    """``datasets`` ignores a state whose epoch is not the stream's: the shard would restart."""
    pytest.importorskip("datasets")
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    loader = IterableDataLoader(hf_stream(40, shuffle=False), batch_size=BS, seeder=s)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    inner = state["workers"][0]["state"]
    assert set(inner) == {"examples_iterable", "epoch"} and inner["epoch"] == 0
    before = loader.state_dict()
    for bad in ({**inner, "epoch": 1}, {"examples_iterable": 3, "epoch": 0}, {"epoch": 0}):
        with pytest.raises(StateError, match="is not a datasets.IterableDataset state of epoch 0"):
            loader.load_state_dict({**state, "workers": [{**state["workers"][0], "state": bad}]})
    assert loader.state_dict() == before
    loader.load_state_dict(state)  # the real one loads


# --------------------------------------------------------------------------------------- properties
FIELDS = [
    "epoch",
    "batch",
    "next_worker",
    "complete",
    "num_workers",
    "batch_size",
    "drop_last",
    "world_size",
    "format",
    "version",
    "worker0.produced",
    "worker1.produced",
    "worker0.done",
    "worker1.done",
    "worker0.state",
    "worker1.state",
    "worker0",
    "workers",
]
GARBAGE = st.one_of(st.text(max_size=2), st.none(), st.lists(st.none(), max_size=1))
VALUES = st.one_of(
    st.integers(-3, 30),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
    st.floats(allow_nan=True),
    st.lists(st.integers(0, 5), max_size=3),
    st.dictionaries(
        st.sampled_from(["pos", "nope", "produced", "done", "state"]), GARBAGE, max_size=2
    ),
)


def corrupt(state, field, value):
    part = dict(state["participants"]["loader.0"])
    part["workers"] = [dict(r) for r in part["workers"]]
    if field.startswith("worker") and "." in field:
        w, key = field.split(".")
        part["workers"][int(w[6:])][key] = value
    elif field == "worker0":
        part["workers"][0] = value
    else:
        part[field] = value
    return {**state, "participants": {**state["participants"], "loader.0": part}}


@pytest.mark.parametrize("kind", [Noisy, Counted], ids=["replayed", "stateful"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_a_corrupted_state_is_refused_unchanged_or_resumes_exactly(kind, field, value):
    """One field of a real state (2 workers, after batch 3) set to an arbitrary value. A
    well-formed position of a dataset's own state (``{"pos": <int>}``) is not drawn: only the
    dataset could tell it from the saved one."""
    rest, saved = reference(kind, 2)
    bad = corrupt(saved, field, value)
    s, loader = build(kind, 2)
    s.reseed(1, 0)
    before, run_before = loader.state_dict(), canon(s.state_dict())
    try:
        s.load_state_dict(bad)
    except StateError:
        assert loader.state_dict() == before and canon(s.state_dict()) == run_before
        return
    out = []
    try:
        for epoch in (0, 1):
            s.reseed(1, epoch)
            out.extend(flat(b) for b in loader)
    except StateError as exc:  # the dataset took the state into a copy but fails on it: named
        assert "resuming from its saved dataset state" in str(exc) and out == []
        return
    assert out == rest, (field, value)


def test_the_loader_refuses_a_map_style_dataset_and_seeder_dataloader_a_stream():
    s = Seeder()
    s.init(MASTER)
    with pytest.raises(TypeError, match=r"use seeder.IterableDataLoader\(Noisy\(...\)"):
        seeder.DataLoader(Noisy(N), batch_size=BS, seeder=s)
    with pytest.raises(TypeError, match="use seeder.DataLoader for a map-style dataset"):
        IterableDataLoader(torch.arange(4), seeder=s)
    loader = IterableDataLoader(Noisy(N), batch_size=BS, seeder=s)
    assert type(loader) is IterableDataLoader and seeder.IterableDataLoader is IterableDataLoader
    assert "IterableDataLoader" in seeder.__all__ and not isinstance(loader, seeder.DataLoader)
