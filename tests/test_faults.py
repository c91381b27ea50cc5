"""Atomic or nothing: bad arguments, impossible states and faults (Ctrl-C, raising generators,
threads).

Every case asserts "a clear error and nothing changed" (every RNG, the bookkeeping, the
registry, every participant's position: ``World.everything``) or "exact". The SIGKILL cases
are in ``test_fault_kills.py``; random state mutations in ``test_state_properties.py``.
"""

from __future__ import annotations

import copy
import random
import signal
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
from faultkit import TALLY, Gain, World, canon, uninterrupted

from seeder import Seeder, StateError


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and TALLY:
        reporter.write_line("")
        for (cls, outcome), n in sorted(TALLY.items()):
            reporter.write_line(f"FAULT-TALLY {cls:14s} {outcome:30s} {n}")


def refused(world: World, call, errors=(StateError, ValueError, TypeError), cls="bad states"):
    """``call()`` raises one of ``errors`` and changes nothing; returns the error."""
    before = world.everything()
    with pytest.raises(errors) as info:
        call()
    assert world.everything() == before, f"state changed after rejecting: {info.value}"
    assert str(info.value), "an error with no message"
    TALLY[cls, "clear error"] += 1
    return info.value


def with_rng(state, name, **changes):
    bad = copy.deepcopy(state)
    bad["rngs"][name] = {**bad["rngs"][name], **changes} if changes else bad["rngs"][name]
    return bad


# ------------------------------------------------------------------------------------- bad states


def _python_zero(st):
    st["rngs"]["python"]["state"] = (0,) * 624 + (624,)


def _numpy_zero(st):
    st["rngs"]["numpy"]["key"] = torch.zeros(624, dtype=torch.int32)


def _torch_zero(st):
    st["rngs"]["torch"] = torch.zeros_like(st["rngs"]["torch"])


def _torch_view(st):
    t = st["rngs"]["torch"]
    st["rngs"]["torch"] = torch.stack([t, t], 1).reshape(-1)[
        ::2
    ]  # the same bytes, as a non-contiguous view


def _set(path, value):
    def mutate(st):
        node = st
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value

    return mutate


def _add_key(path):
    def mutate(st):
        node = st
        for k in path:
            node = node[k]
        node["extra"] = 0

    return mutate


BAD_STATES = {
    "python all-zero MT words": _python_zero,
    "numpy all-zero MT key": _numpy_zero,
    "torch all-zero state": _torch_zero,
    "torch non-contiguous view": _torch_view,
    "python gauss_next nan": _set(("rngs", "python", "gauss_next"), float("nan")),
    "python gauss_next inf": _set(("rngs", "python", "gauss_next"), float("inf")),
    "python version 3.0": _set(("rngs", "python", "version"), 3.0),
    "numpy cached_gaussian nan": lambda st: (
        _set(("rngs", "numpy", "has_gauss"), 1)(st),
        _set(("rngs", "numpy", "cached_gaussian"), float("nan"))(st),
    ),
    "numpy cached_gaussian -inf": _set(("rngs", "numpy", "cached_gaussian"), float("-inf")),
    "numpy has_gauss 1.0": _set(("rngs", "numpy", "has_gauss"), 1.0),
    "numpy has_gauss True": _set(("rngs", "numpy", "has_gauss"), True),
    "numpy pos True": _set(("rngs", "numpy", "pos"), True),
    "state version True": _set(("version",), True),
    "derivation_version True": _set(("derivation_version",), True),
    "loader version True": _set(("participants", "loader.0", "version"), True),
    "sampler version True": _set(("participants", "loader.0", "sampler", "version"), True),
    "numpy Generator has_uint32 5": _set(("participants", "generator.2", "has_uint32"), 5),
    "numpy Generator has_uint32 True": _set(("participants", "generator.2", "has_uint32"), True),
    "numpy Generator extra key": _add_key(("participants", "generator.2")),
    "numpy Generator extra inner key": _add_key(("participants", "generator.2", "state")),
    "numpy Generator even PCG64 increment": lambda st: st["participants"]["generator.2"][
        "state"
    ].update(inc=st["participants"]["generator.2"]["state"]["inc"] - 1),
    "numpy Generator state as float": lambda st: st["participants"]["generator.2"]["state"].update(
        state=float(st["participants"]["generator.2"]["state"]["state"])
    ),
    "registered RandomState all-zero": _set(
        ("participants", "generator.4", "key"), torch.zeros(624, dtype=torch.int32)
    ),
    "registered random.Random all-zero": _set(
        ("participants", "generator.1", "state"), (0,) * 624 + (624,)
    ),
    "registered torch.Generator all-zero": lambda st: st["participants"].update(
        {"generator.3": torch.zeros_like(st["participants"]["generator.3"])}
    ),
    "sampler key not derived from the master seed": lambda st: st["participants"]["loader.0"][
        "sampler"
    ].update(key=st["participants"]["loader.0"]["sampler"]["key"] ^ 1),
    "last_reseed epoch differs from the loader's": _set(("last_reseed",), [1, 2]),
    "last_reseed epoch 0, loader in epoch 1": _set(("last_reseed",), [1, 0]),
}


@pytest.mark.parametrize("case", sorted(BAD_STATES))
def test_an_impossible_state_is_refused_and_changes_nothing(case):
    world = World()
    bad = world.state()
    BAD_STATES[case](bad)
    refused(world, lambda: world.s.load_state_dict(bad), errors=StateError)
    with pytest.raises(StateError):
        world.s.check_state_dict(bad)


def test_gathered_state_with_a_bool_version_is_refused():
    world = World()
    gathered = world.s.gather_state_dict()
    gathered["version"] = True
    refused(world, lambda: world.s.load_state_dict(gathered), errors=StateError)


def test_a_good_state_still_resumes_exactly():
    want = uninterrupted()
    world = World()
    world.s.load_state_dict(world.state())
    assert world.rest_of_epoch() == want
    TALLY["bad states", "exact"] += 1


# ------------------------------------------------------------------------------------- bad
# arguments


BAD_ARGUMENTS = {
    "init master_seed -1": lambda w, p: w.s.init(-1),
    "init master_seed 2**63": lambda w, p: w.s.init(2**63),
    "init master_seed True": lambda w, p: w.s.init(True),
    "init master_seed '7'": lambda w, p: w.s.init("7"),
    "init master_seed 1.0": lambda w, p: w.s.init(1.0),
    "init ngpus 0": lambda w, p: w.s.init(1, ngpus=0),
    "init rank -1": lambda w, p: w.s.init(1, rank=-1),
    "init rank beyond ngpus": lambda w, p: w.s.init(1, ngpus=2, rank=2),
    "init deterministic 'yes'": lambda w, p: w.s.init(1, deterministic="yes"),
    "init snapshot_dir 3": lambda w, p: w.s.init(1, snapshot_dir=3),
    "init snapshot_dir ''": lambda w, p: w.s.init(1, snapshot_dir=""),
    "init snapshot_dir": lambda w, p: w.s.init(7, snapshot_dir=p),  # init takes no snapshot
    "reseed task '1'": lambda w, p: w.s.reseed("1", 0),
    "reseed task -1": lambda w, p: w.s.reseed(-1, 0),
    "reseed epoch 2**64": lambda w, p: w.s.reseed(1, 2**64),
    "reseed task True": lambda w, p: w.s.reseed(True, 0),
    "reseed epoch 1.0": lambda w, p: w.s.reseed(1, 1.0),
    "register_generator 3": lambda w, p: w.s.register_generator(3),
    "register_generator shared 'no'": lambda w, p: w.s.register_generator(
        random.Random(), shared="no"
    ),
    "register_generator twice": lambda w, p: w.s.register_generator(w.gens[0]),
    "register_generator f raises": lambda w, p: w.s.register_generator(_raises),
    "register_generator wrong arity": lambda w, p: w.s.register_generator(lambda: None),
    "register_generator two-argument f": lambda w, p: w.s.register_generator(lambda a, b: None),
    "unregister_generator unknown": lambda w, p: w.s.unregister_generator(random.Random()),
    "unregister_generator 3": lambda w, p: w.s.unregister_generator(3),
    "load_state_dict None": lambda w, p: w.s.load_state_dict(None),
    "load_state_dict []": lambda w, p: w.s.load_state_dict([]),
    "load_state_dict {}": lambda w, p: w.s.load_state_dict({}),
    "load_state_dict allow_world_change 'yes'": lambda w, p: w.s.load_state_dict(
        w.state(), allow_world_change="yes"
    ),
    "load_state_dict another rank": lambda w, p: w.s.load_state_dict({**w.state(), "rank": 1}),
    "load_state_dict another world": lambda w, p: w.s.load_state_dict(
        {**w.state(), "world_size": 2}
    ),
    "load_state_dict missing participant": lambda w, p: w.s.load_state_dict(
        {
            **w.state(),
            "participants": {k: v for k, v in w.state()["participants"].items() if k != "loader.0"},
        }
    ),
}


def _raises(seed: int) -> None:
    raise RuntimeError("this generator is broken")


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_a_bad_argument_gets_a_clear_error_and_changes_nothing(case, tmp_path):
    world = World()
    refused(
        world,
        lambda: BAD_ARGUMENTS[case](world, tmp_path),
        errors=(TypeError, ValueError, OSError, RuntimeError),
        cls="bad arguments",
    )


def test_a_generator_that_raised_at_registration_is_not_called_again():
    world = World()
    calls = []

    def broken(seed: int) -> None:
        calls.append(seed)
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError):
        world.s.register_generator(broken)
    world.s.reseed(1, 5)  # not registered: a later reseed works and does not call it
    assert len(calls) == 1 and all(g.gen is not broken for g in world.s.generators())
    world.s.register_generator(lambda seed: None)  # the stream numbering did not move
    assert [g.stream for g in world.s.generators()] == [1, 2, 3, 4, 5, 6]


# --------------------------------------------------------------------------------------------
# faults


class Flaky:
    """A registered generator object that raises while it is seeded when ``fail`` is set."""

    def __init__(self) -> None:
        self.rng = random.Random()
        self.fail = False

    def reseed_rng(self, seed: int) -> None:
        if self.fail:
            raise RuntimeError("flaky generator")
        self.rng.seed(seed)

    def state_dict(self):
        return {"state": list(self.rng.getstate()[1])}

    def load_state_dict(self, state):
        self.rng.setstate((3, tuple(state["state"]), None))


def test_a_reseed_whose_generator_raises_is_recorded_until_a_reseed_completes():
    world = World()
    flaky = Flaky()
    world.s.register_generator(flaky.reseed_rng)
    after = Seeder()  # the same run, never interrupted
    after.init(42)
    twin = [random.Random(), np.random.default_rng(), torch.Generator(), np.random.RandomState()]
    for g in twin:
        after.register_generator(g)
    after.register_generator(Gain().reseed_rng)
    twin_flaky = Flaky()
    after.register_generator(twin_flaky.reseed_rng)

    flaky.fail = True
    with pytest.raises(RuntimeError, match="flaky"):
        world.s.reseed(1, 2)
    with pytest.raises(
        RuntimeError,
        match=r"reseed\(1, 2\) raised RuntimeError in .*reseed_rng.*call seeder.reseed\(1, "
        r"2\) again",
    ):
        world.s.state_dict()  # the streams are half in epoch 2: no checkpoint may describe that
    with pytest.raises(RuntimeError, match="refused"):
        world.s.gather_state_dict()
    flaky.fail = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the retry is no repeat of a finished reseed
        world.s.reseed(1, 2)
    got = world.state()
    after.reseed(1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = after.state_dict()
    for key in ("generator.1", "generator.2", "generator.3", "generator.4", "generator.6"):
        assert canon(got["participants"][key]) == canon(want["participants"][key]), key
    assert canon(got["rngs"]) == canon(want["rngs"]) and got["last_reseed"] == [1, 2]
    TALLY["faults", "clear error"] += 1


def test_ctrl_c_during_reseed_is_recorded_too():
    world = World()

    def interrupted(seed: int) -> None:
        raise KeyboardInterrupt

    flaky = Flaky()
    world.s.register_generator(flaky.reseed_rng)
    world.s.registry.add_generator(interrupted, shared=False)
    with pytest.raises(KeyboardInterrupt):
        world.s.reseed(1, 3)
    with pytest.raises(RuntimeError, match="KeyboardInterrupt"):
        world.s.state_dict()
    TALLY["faults", "clear error"] += 1


class Interrupting:
    """A participant whose ``load_state_dict`` sends this process a real SIGINT (Ctrl-C) ``times``
    times."""

    seeder_kind = "interrupting"

    def __init__(self, times: int) -> None:
        self.times = times
        self.value = 0

    def seeder_reseed(self, seeder, task_id, epoch):
        self.value = epoch

    def state_dict(self):
        return {"value": self.value}

    def check_state_dict(self, state):
        if not isinstance(state, dict) or type(state.get("value")) is not int:
            raise StateError("bad")

    def load_state_dict(self, state):
        self.value = state["value"]
        if self.times:
            self.times -= 1
            signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("times", [1, 2], ids=["ctrl-c", "ctrl-c-again-during-the-rollback"])
def test_a_real_ctrl_c_during_load_puts_everything_back(times, python_sigint):
    world = World()
    world.s.join(
        Interrupting(0), weak=False
    )  # validated participants load last: after the loader and the generators
    state = world.state()
    state["participants"]["interrupting.0"] = {"value": 99}
    want = uninterrupted()
    other = World()  # the same run again (World() reseeds the global RNGs as the first one did)
    late = Interrupting(times)
    other.s.join(late, weak=False)
    before = other.everything()
    with pytest.raises(KeyboardInterrupt):
        other.s.load_state_dict(state)
    assert other.everything() == before and late.value == 0
    late.times = 0
    other.s.load_state_dict(state)  # afterwards the load works and resumes exactly
    assert other.rest_of_epoch() == want and late.value == 99
    TALLY["faults", "exact"] += 1


def _interrupt_at(n: int, exc: type):
    """A trace function raising ``exc`` at the ``n``-th Python call event (then tracing stops); 0:
    count only."""
    count = [0]
    applying = []  # call numbers at which apply_entry started

    def trace(frame, event, arg):
        if event == "call":
            count[0] += 1
            if frame.f_code.co_name == "apply_entry":
                applying.append(count[0])
            if count[0] == n:
                raise exc("injected")
        return None

    return trace, count, applying


def _points(world: World, state: dict, base: dict, many: int) -> list:
    """Call numbers to interrupt at: a few in the checks, ``many`` spread over the apply and its
    end."""
    world.s.load_state_dict(base)
    trace, count, applying = _interrupt_at(0, RuntimeError)
    sys.settrace(trace)
    try:
        world.s.load_state_dict(state)
    finally:
        sys.settrace(None)
    total, start = count[0], applying[0]
    checks = [1, 2, start // 4, start // 2, start - 1, start]
    return sorted(
        {*checks, *(start + 1 + (total - start) * i // many for i in range(many)), total, total + 1}
    )


@pytest.mark.parametrize(
    "exc, many", [(KeyboardInterrupt, 40), (RuntimeError, 10), (SystemExit, 10)]
)
def test_an_exception_at_points_inside_load_state_dict_changes_nothing(exc, many):
    """Ctrl-C (or an error, or SystemExit) at calls a load makes, most while applying: exact, or
    nothing changed."""
    world = World()
    state = world.state()
    world.draw()  # the live state differs from the saved one
    world.s.reseed(1, 4)
    base = world.state()
    raised = 0
    for n in _points(world, state, base, many):
        world.s.load_state_dict(base)
        before = world.everything()
        trace, count, _ = _interrupt_at(n, exc)
        sys.settrace(trace)
        try:
            world.s.load_state_dict(state)
        except (exc, StateError):
            sys.settrace(None)
            assert world.everything() == before, f"changed after {exc.__name__} at call {n}"
            raised += 1
        else:
            sys.settrace(None)
            assert count[0] < n, f"call {n} was reached but did not raise"
            assert canon(world.state()) == canon(state)
            TALLY["faults", "exact"] += 1
        finally:
            sys.settrace(None)
    assert raised >= many, raised
    TALLY["faults", "clear error"] += raised


def test_a_failing_apply_names_everything_it_put_back():
    world = World()
    state = world.state()

    def gone(st):
        world.gain.load_state_dict = Gain.load_state_dict.__get__(
            world.gain
        )  # fails once: the rollback works
        raise OSError("disk gone")

    world.gain.load_state_dict = (
        gone  # the owner's load fails while applying (nothing validates its state)
    )
    before = world.everything()
    with pytest.raises(
        StateError,
        match=r"OSError: disk gone.*as it was before load_state_dict \(put back: generator\.5\)",
    ):
        world.s.load_state_dict(state)
    assert world.everything() == before
    TALLY["faults", "clear error"] += 1


# ---------------------------------------------------------------------------------------- threads


def test_threads_calling_reseed_and_state_dict_never_see_half_a_reseed():
    s = Seeder()
    s.init(11)
    rng = random.Random()
    s.register_generator(rng)
    epochs = range(8)
    want = {}
    saved = random.getstate(), np.random.get_state(), torch.get_rng_state()
    for e in epochs:
        s.reseed(1, e)
        st = s.state_dict()
        want[e] = canon((st["rngs"], st["participants"]))
    errors, torn = [], []
    interval = sys.getswitchinterval()

    def work(k: int) -> None:
        local = random.Random(k)
        try:
            for i in range(60):
                if (i + k) % 2:
                    s.reseed(1, local.choice(epochs))
                else:
                    st = s.state_dict()
                    if canon((st["rngs"], st["participants"])) != want[st["last_reseed"][1]]:
                        torn.append(st["last_reseed"])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    sys.setswitchinterval(1e-6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # repeated (task, epoch) warnings
            threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        torch.set_rng_state(saved[2])
    assert not errors and not torn, f"{len(torn)} torn state dicts, errors {errors}"
    TALLY["faults", "exact"] += 1
