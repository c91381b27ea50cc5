"""Per-step traces (seeder._run.trace), what verify reads from them (seeder.verify._diagnose), and
the mid-epoch stop plan."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import seeder
from seeder._errors import SeederWarning
from seeder._run import trace
from seeder.verify import Contract, Metrics
from seeder.verify._diagnose import MSG_BASE_SEED, diagnose, diagnose_dirs
from seeder.verify._midepoch import StepStopSupport, mid_epoch_step


def _global_states():
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state().tolist()


@pytest.fixture
def traced(tmp_path, monkeypatch, tool_hooks):
    prefix = str(tmp_path / "trace")
    monkeypatch.setenv(trace.ENV_TRACE, prefix)
    return prefix


# --- seeder._run.trace
# ---------------------------------------------------------------------------------------------


def test_record_step_without_the_variable_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(trace.ENV_TRACE, raising=False)
    s = seeder.Seeder()
    s.init(1)
    trace.record_step(s, "loader", epoch=0, step=0, position=0)
    assert not trace.enabled() and trace.read_trace(str(tmp_path / "trace")) == {}


def test_record_step_reads_every_state_and_changes_none(traced):
    s = seeder.Seeder()
    s.init(7)
    member = random.Random()
    s.register_generator(member)
    s.register_generator(lambda seed: None)  # a plain callable: no state to read
    sampler = seeder.DistributedSampler(range(10), seeder=s)
    s.reseed(1, 0)
    before, member_before = _global_states(), member.getstate()
    trace.record_step(s, "loader", epoch=0, step=0, position=0)
    assert _global_states() == before and member.getstate() == member_before
    random.random()  # only Python's global RNG moves
    trace.record_step(s, "loader", epoch=0, step=1, position=4)
    first, second = trace.read_trace(traced)[0]
    assert (first["source"], first["epoch"], first["step"], first["position"]) == (
        "loader",
        0,
        0,
        0,
    )
    assert set(first["rngs"]) >= {"python", "numpy", "torch"} and first["last_reseed"] == [1, 0]
    assert set(first["participants"]) == {"generator.1", "generator.2", "sampler.0"}
    assert (
        first["participants"]["generator.2"] is None
        and first["participants"]["generator.1"] is not None
    )
    assert first["positions"] == {"sampler.0": {"epoch": 0, "position": 0}}
    changed = {n for n in first["rngs"] if first["rngs"][n] != second["rngs"][n]}
    assert changed == {"python"} and first["participants"] == second["participants"]
    del sampler


def test_sampler_records_at_iteration_start_and_advance_and_keeps_its_warning(traced):
    s = seeder.Seeder()
    s.init(3)
    data = list(range(12))
    sampler = seeder.DistributedSampler(data, seeder=s)
    loader = DataLoader(
        data, batch_size=4, sampler=sampler, generator=seeder.data.dataloader_generator(seeder=s)
    )
    s.reseed(1, 0)
    for i, batch in enumerate(loader):
        sampler.advance(len(batch))
        if i == 1:
            break
    records = trace.read_trace(traced)[0]
    assert [(r["source"], r["epoch"], r["step"], r["position"]) for r in records] == [
        ("sampler", 0, None, 0),
        ("sampler", 0, None, 4),
        ("sampler", 0, None, 8),
    ]
    assert [r["positions"]["sampler.0"]["position"] for r in records] == [0, 4, 8]
    # Tracing reads the sampler without using up its warning about a missing advance().
    s.reseed(1, 1)
    next(iter(loader))
    with pytest.warns(SeederWarning, match="no sample was reported consumed"):
        sampler.state_dict()


def test_fingerprint_is_stable_and_tells_states_apart():
    t = torch.arange(4, dtype=torch.uint8)
    assert trace.fingerprint({"a": t, "b": [1, 2]}) == trace.fingerprint(
        {"b": [1, 2], "a": t.clone()}
    )
    assert trace.fingerprint(t) != trace.fingerprint(t + 1)
    assert trace.fingerprint(random.Random(1).getstate()) != trace.fingerprint(
        random.Random(2).getstate()
    )
    assert trace.fingerprint([1, 2.0]) != trace.fingerprint([1, 2])


# --- seeder.verify._diagnose
# --------------------------------------------------------------------------------------


def rec(
    position, epoch=1, source="sampler", python="p", numpy="n", torch="t", gen="g", sampler_pos=None
):
    pos = {
        "sampler.0": {"epoch": epoch, "position": position if sampler_pos is None else sampler_pos}
    }
    return {
        "source": source,
        "epoch": epoch,
        "position": position,
        "rngs": {"python": python, "numpy": numpy, "torch": torch},
        "participants": {"generator.1": gen, "sampler.0": "s"},
        "positions": pos,
    }


def metrics_with_epochs(epochs):
    return Metrics([(i,) for i in range(len(epochs))], np.zeros(len(epochs)), list(epochs))


FULL = [
    rec(0, 0, python="a"),
    rec(8, 0),
    rec(0, 1, python="e1", numpy="e1", torch="e1"),
    rec(8, 1),
    rec(16, 1),
    rec(24, 1),
    rec(0, 2, python="x"),
]
STOPPED = FULL[:4]  # stopped after one step of epoch 1 (sampler position 8)


def test_diagnose_names_the_base_seed_draw_of_a_loader_without_generator():
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8, torch="drawn"), rec(16)]})
    assert (d.state, d.epoch, d.position, d.message) == ("torch", 1, 8, MSG_BASE_SEED)
    assert "pass generator=seeder.data.dataloader_generator()" in d.message.lower()


def test_diagnose_position_never_counted_and_position_not_restored():
    stopped = [r for r in STOPPED if r["position"] == 0]  # no advance(): only iteration starts
    d = diagnose(
        {0: [r for r in FULL if r["position"] == 0]},
        {0: stopped},
        {0: [rec(0, python="late")]},
        metrics_with_epochs([0, 0, 1, 1, 1]),
    )
    assert (
        d.state == "position"
        and "trained 3 step(s)" in d.message
        and "sampler.advance(len(batch))" in d.message
    )
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(0, python="e1", numpy="e1", torch="e1")]})
    assert (
        d.state == "position"
        and "continued at sample 0 of epoch 1, but the stopped run had reached sample 8 of epoch 1"
        in d.message
    )
    assert "seeder.load_state_dict()" in d.message


def test_diagnose_reseeded_and_not_restored_rngs():
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8, python="e1", numpy="e1", torch="e1")]})
    assert d.state == "reseeded" and "back at the start of epoch 1" in d.message
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8, python="?", numpy="?", torch="?")]})
    assert d.state == "rngs" and "seeder state was not restored" in d.message


def test_diagnose_one_rng_a_generator_and_a_later_difference():
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8, numpy="?")]})
    assert d.state == "numpy" and d.message.startswith(
        "NumPy's global RNG differs right after the resume"
    )
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8, gen="?")]})
    assert d.state == "generator.1" and d.message.startswith("registered generator 1 differs")
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8), rec(16), rec(24, python="?")]})
    assert d.state == "python" and (d.epoch, d.position) == (1, 24)
    assert d.message.startswith(
        "every traced state matched for 2 batch(es) after the resume; then at sample 24 of epoch 1"
    )
    d = diagnose({0: FULL}, {0: STOPPED}, {0: [rec(8), rec(16), rec(24), rec(0, 2, python="y")]})
    assert d.position == 0 and "seeder.reseed(1, epoch)" in d.message


def test_diagnose_lines_up_the_source_that_recorded_the_last_step():
    """A loader records each batch; the sampler it iterates records only where its iterations
    start."""

    def batch(pos, epoch=1, **kw):
        return rec(pos, epoch, source="loader", **kw)

    full = [rec(0, 1), batch(0), batch(8), batch(16), rec(0, 2), batch(0, 2)]
    stopped = full[:3]  # handed out the batch at sample 8, trained it, saved
    d = diagnose({0: full}, {0: stopped}, {0: [rec(16, 1), batch(16, torch="?")]})
    assert (d.state, d.position) == ("torch", 16)
    assert diagnose({0: full}, {0: stopped}, {0: [rec(16, 1), batch(16)]}).state == "none"


def test_diagnose_all_traced_states_equal_points_elsewhere():
    d = diagnose({0: FULL}, {0: STOPPED}, {0: FULL[3:]})
    assert (
        d.state == "none" and "optimizer" in d.message and "seeder.data.SeededDataset" in d.message
    )


def test_diagnose_ranks_and_what_it_cannot_tell(tmp_path):
    d = diagnose(
        {0: FULL, 1: FULL}, {0: STOPPED, 1: STOPPED}, {0: FULL[3:], 1: [rec(8, torch="?")]}
    )
    assert d.rank == 1 and d.message.startswith("on rank 1, torch's global RNG")
    assert (
        diagnose({0: FULL}, {0: [rec(0, 0, python="other")] + STOPPED}, {0: [rec(8, torch="?")]})
        is None
    )
    assert diagnose({0: FULL}, {0: STOPPED}, {}) is None
    assert (
        diagnose_dirs(tmp_path, tmp_path, tmp_path) is None
    )  # a script that does not use seeder: no trace


# --- seeder.verify._midepoch
# --------------------------------------------------------------------------------------


def test_mid_epoch_step_is_an_odd_step_inside_the_last_epoch():
    assert mid_epoch_step(metrics_with_epochs([0] * 64 + [1] * 64)) == (
        97,
        "33 of 64 steps into epoch 1",
    )
    assert mid_epoch_step(metrics_with_epochs([0, 0])) == (1, "1 of 2 steps into epoch 0")
    steps, why = mid_epoch_step(metrics_with_epochs([0, 1]))
    assert steps is None and "single step" in why
    no_epochs = Metrics([(i,) for i in range(12)], np.zeros(12), [None] * 12)
    assert mid_epoch_step(no_epochs, epochs=2) == (9, "3 of 6 steps into epoch 1")


def test_step_stop_support_is_decided_from_the_contract_without_running_the_command():
    assert StepStopSupport(Contract(), explicit_step=True).result()[0]
    ok, why = StepStopSupport(Contract(stop_after_steps="")).result()
    assert not ok and "--stop-after-steps S" in why
    assert StepStopSupport(Contract(stop_after_steps="--max-steps {steps}")).result() == (
        True,
        "the contract passes '--max-steps {steps}'",
    )
