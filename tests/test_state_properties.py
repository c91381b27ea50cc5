"""Property: a valid state mutated at random either loads exactly or is refused and changes nothing.

Mutations change types, values, keys and nesting anywhere in a full state (global RNGs,
registered RNG objects, a registered callable's owner, a ``seeder.DataLoader`` inside an
epoch). Mutations that make a state no run can produce (a wrong type, an unknown or missing
key, a degenerate or non-finite RNG content, a derived value that disagrees with the master
seed or the last reseed) must be refused. Any mutation that loads must come back unchanged from
``state_dict()`` and resume the same way twice. Derandomized: CI sees the same cases every run.
"""

from __future__ import annotations

import copy
import struct
import warnings
from typing import Any

import pytest
import torch
from faultkit import TALLY, World, canon
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seeder import StateError

Path = tuple[Any, ...]
#: Paths (by their last keys) whose value may change type legitimately, or whose values are free.
FREE_TYPES = {("rngs", "python", "gauss_next"), ("participants", "generator.1", "gauss_next")}
#: Fields whose value no run can change alone: they are derived from, or must agree with, the rest.
DERIVED = {
    "master_seed",
    "world_size",
    "rank",
    "version",
    "derivation_version",
    "format",
    "key",
    "epoch",
    "last_reseed",
    "dataset_len",
    "num_replicas",
    "batch_size",
    "num_batches",
    "mode",
    "shuffle",
    "drop_last",
    "task",
    "stream",
    "position",
    "batch",
    "bit_generator",
    "kind",
    "pipeline_id",
}


@pytest.fixture(scope="module")
def world():
    w = World()
    good = w.state()
    w.draw()
    w.s.reseed(1, 3)
    base = w.state()  # loaded before each case, so that a load that changes something is seen
    return w, good, base


def paths(obj: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Every (path, value) of a state: dict entries and the items of short sequences,
    recursively."""
    out = [(path, obj)]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, path + (k,))
    elif isinstance(obj, (list, tuple)) and len(obj) <= 4:
        for i, v in enumerate(obj):
            out += paths(v, path + (i,))
    return out


def put(obj: Any, path: Path, value: Any) -> Any:
    """``obj`` with ``value`` at ``path`` (tuples rebuilt); ``value`` is ``DROP`` to remove a dict
    key."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        new = dict(obj)
        if not rest and value is DROP:
            del new[head]
        else:
            new[head] = put(obj[head], rest, value)
        return new
    items = list(obj)
    items[head] = put(items[head], rest, value)
    return type(obj)(items) if isinstance(obj, tuple) else items


DROP = object()
#: Participants that validate nothing (an owner without check_state_dict): their own load_state_dict
#: is the only check.
UNCHECKED = {"generator.5"}


class Case:
    """A mutated state, whether it must be refused, and a short description (hypothesis prints
    it)."""

    def __init__(self, state: dict, must_refuse: bool, what: str):
        self.state, self.must_refuse, self.what = state, must_refuse, what

    def __repr__(self) -> str:
        return f"Case({self.what!r}, must_refuse={self.must_refuse})"


OTHERS = [None, True, False, 1.5, "x", [], {}, float("nan"), float("inf"), -1, 2**64, (1, 2)]


def _set(fmt: str, at: int, *values: Any):
    return lambda raw: struct.pack_into(fmt, raw, at, *values)


#: Contents of a torch CPU generator state (5056 bytes, see seeder/_seeding/rngs_torch.py) that
#: torch loads but no generator reaches: each must be refused.
IMPOSSIBLE_TORCH = {
    "all-zero key": lambda raw: raw.__setitem__(slice(24, 24 + 624 * 8), 0),
    "word over 32 bits": _set("<Q", 24 + 8 * 5, 2**32 + 1),
    "NaN cached double normal": lambda raw: (
        _set("<d", 5024, float("nan"))(raw),
        _set("<i", 5040, 1)(raw),
    ),
    "inf cached float normal": lambda raw: (
        _set("<f", 5048, float("-inf"))(raw),
        raw.__setitem__(5052, 1),
    ),
    "float flag 2": lambda raw: raw.__setitem__(5052, 2),
    "double flag 3": _set("<i", 5040, 3),
    "not seeded": _set("<i", 12, 0),
    "left 0": _set("<i", 8, 0),
    "next 625": _set("<Q", 16, 625),
}


@st.composite
def mutations(draw, good: dict):
    """A :class:`Case`."""
    state, must, what = draw(_mutations(good))
    where = what.split(")")[0]
    return Case(state, must and not any(k in where for k in UNCHECKED), what)


def _derived(where: tuple) -> bool:
    """Whether the value at ``where`` is cross-checked against another part of the state."""
    if where[-2:] == ("sampler", "position") and where[-3].startswith("loader"):
        # a seeder.DataLoader resumes from its own batch count; its sampler's is not cross-checked
        return False
    if where == ("last_reseed", 0):
        # a reseed of another task (validation, say) leaves the loader's epoch as it is: possible
        return False
    return any(k in DERIVED for k in where if isinstance(k, str))


def _drop(draw, good: dict, where: tuple, value: Any, derived: bool):
    if isinstance(where[-1], str):
        return put(good, where, DROP), True, f"{where} dropped"
    return None


def _add(draw, good: dict, where: tuple, value: Any, derived: bool):
    if isinstance(value, dict):
        return (
            put(good, where, {**value, draw(st.sampled_from(["extra", "Key", "0"])): 0}),
            True,
            f"{where} key added",
        )
    return None


def _nest(draw, good: dict, where: tuple, value: Any, derived: bool):
    return put(good, where, [value]), True, f"{where} nested in a list"


def _word(draw, good: dict, where: tuple, value: Any, derived: bool):
    """One word of a Mersenne Twister state (625 words) replaced."""
    if not (isinstance(value, (list, tuple)) and len(value) == 625):
        return None
    i = draw(st.integers(0, 624))
    new = draw(st.sampled_from([-1, 2**32, 1.5, "x", None, 625, 7, 123456789]))
    valid = type(new) is int and 0 <= new < 2**32 and (i < 624 or new <= 624)
    return (
        put(good, where, tuple(new if j == i else w for j, w in enumerate(value))),
        not valid,
        f"{where} word {i} = {new!r}",
    )


def _torch(draw, good: dict, where: tuple, value: Any, derived: bool):
    """A torch CPU generator state (5056 bytes) made impossible."""
    if not (
        isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.numel() == 5056
    ):
        return None
    how = draw(st.sampled_from(sorted(IMPOSSIBLE_TORCH)))
    bad = value.clone()
    IMPOSSIBLE_TORCH[how](bad.numpy())
    return put(good, where, bad), True, f"{where} torch CPU state: {how}"


def _tensor(draw, good: dict, where: tuple, value: Any, derived: bool):
    if not isinstance(value, torch.Tensor):
        return None
    how = draw(st.sampled_from(["zeros", "dtype", "view", "byte", "short"]))
    if how == "zeros":
        return put(good, where, torch.zeros_like(value)), True, f"{where} zeros"
    if how == "dtype":
        return put(good, where, value.to(torch.float64)), True, f"{where} as float64"
    if how == "view":
        # torch refuses a generator state that is a view; NumPy's key is copied (the same
        # values: it may load)
        view = torch.stack([value, value], -1).reshape(-1)[::2]
        return put(good, where, view), value.dtype == torch.uint8, f"{where} as a view"
    if how == "short":
        return put(good, where, value[:-1].clone()), True, f"{where} one element short"
    flat = value.clone().view(-1)
    i = draw(st.integers(0, flat.numel() - 1))
    flat[i] = flat[i] ^ 1 if value.dtype != torch.float64 else flat[i] + 1
    return put(good, where, flat.view(value.shape)), False, f"{where} element {i} changed"


def _value(draw, good: dict, where: tuple, value: Any, derived: bool):
    """Another int or float in the place of one."""
    if type(value) is int:
        new = draw(st.sampled_from([value + 1, value - 1, 0, 2**63, -1, 2**128]))
        return put(good, where, new), derived, f"{where} {value} -> {new}"
    if type(value) is float:
        new = draw(st.sampled_from([value + 0.5, -value, float("nan"), float("-inf")]))
        return (
            put(good, where, new),
            new != new or abs(new) == float("inf"),
            f"{where} {value} -> {new}",
        )
    return None


def _other(draw, good: dict, where: tuple, value: Any, derived: bool):
    """One of :data:`OTHERS` in the place of the value: refused unless of its type (or a free
    type's)."""
    new = draw(st.sampled_from(OTHERS))
    if type(new) is type(value) or (where in FREE_TYPES and (new is None or type(new) is float)):
        return (
            put(good, where, new),
            derived or new != new or new in (float("inf"),),
            f"{where} = {new!r}",
        )
    return put(good, where, new), True, f"{where}: {type(value).__name__} -> {new!r}"


#: How each kind of mutation changes a value (None where it does not apply to the value: then
#: :func:`_other`).
_MUTATORS = {
    "drop": _drop,
    "add": _add,
    "nest": _nest,
    "word": _word,
    "torch": _torch,
    "tensor": _tensor,
    "value": _value,
}


@st.composite
def _mutations(draw, good: dict):
    """``(mutated state, must_refuse, description)``; descriptions start with the path."""
    where = draw(st.sampled_from([p for p, _ in paths(good) if p]))
    value = paths(good, ())[[p for p, _ in paths(good)].index(where)][1]
    kind = draw(
        st.sampled_from(["type", "value", "drop", "add", "nest", "word", "tensor", "torch"])
    )
    derived = _derived(where)
    mutator = _MUTATORS.get(kind)
    change = mutator(draw, good, where, value, derived) if mutator else None
    return change if change is not None else _other(draw, good, where, value, derived)


def same(a: Any) -> Any:
    """:func:`canon` with lists and tuples, and NumPy and Python ints, alike (loading normalises
    those)."""
    c = canon(a)

    def norm(x):
        if isinstance(x, tuple) and len(x) == 2 and x[0] in ("list", "tuple"):
            return ("seq", tuple(norm(v) for v in x[1]))
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "dict":
            return ("dict", tuple((k, norm(v)) for k, v in x[1]))
        if isinstance(x, tuple) and len(x) == 2 and x[0].startswith(("int", "uint")):
            return ("int", int(x[1]))
        return x

    return norm(c)


@settings(
    max_examples=int(__import__("os").environ.get("SEEDER_PROPERTY_EXAMPLES", 100)),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_a_mutated_state_loads_exactly_or_is_refused_changing_nothing(world, data):
    w, good, base = world
    case = data.draw(mutations(good))
    mutated, must_refuse, what = case.state, case.must_refuse, case.what
    w.s.load_state_dict(base)
    before = w.everything()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w.s.load_state_dict(copy.deepcopy(mutated))
    except (StateError, ValueError, TypeError) as exc:
        assert w.everything() == before, f"{what}: state changed after {type(exc).__name__}: {exc}"
        assert str(exc)
        TALLY["bad states", "clear error"] += 1
        return
    except Exception as exc:  # pragma: no cover - the failure message says what happened
        TALLY["bad states", "crash"] += 1
        raise AssertionError(f"{what}: crashed with {type(exc).__name__}: {exc}") from exc
    assert not must_refuse, f"{what}: silently accepted"
    if not any(
        k in what.split(")")[0] for k in UNCHECKED
    ):  # an owner without check_state_dict takes what it takes
        assert same(w.state()) == same(mutated), (
            f"{what}: loaded but state_dict() differs from what was loaded"
        )
    first = w.rest_of_epoch()
    w.s.load_state_dict(copy.deepcopy(mutated))
    assert w.rest_of_epoch() == first, f"{what}: two resumes from the same state differ"
    TALLY["bad states", "exact"] += 1


@pytest.mark.parametrize("how", sorted(IMPOSSIBLE_TORCH))
def test_impossible_torch_cpu_states_are_refused_changing_nothing(world, how):
    w, good, base = world
    where = [
        p
        for p, v in paths(good)
        if isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.numel() == 5056
    ]
    assert ("rngs", "torch") in where and len(
        where
    ) >= 2  # the global generator and a registered torch.Generator
    for path in where:
        bad = paths(good)[[p for p, _ in paths(good)].index(path)][1].clone()
        IMPOSSIBLE_TORCH[how](bad.numpy())
        w.s.load_state_dict(base)
        before = w.everything()
        with pytest.raises(StateError, match="corrupt"):
            w.s.load_state_dict(put(good, path, bad))
        assert w.everything() == before, f"{path}: {how} changed the state"
