"""The RNG adapters against the libraries' public state APIs, the only way seeder reads or writes
an RNG: the checkpoint path and the loaders' per-batch paths (keep() and watcher()) are bit-exact
with them, and no module of seeder reads an object's memory."""

import ast
import random

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seeder._errors import StateError
from seeder._seeding import derive, seedseq
from seeder._seeding.rngs import (
    NumpyGeneratorAdapter,
    NumpyRandomStateAdapter,
    PythonRandomAdapter,
    fast_seeding_state,
    global_adapters,
    pcg64_state,
)

FAST = settings(max_examples=60, deadline=None)
# Finite only: seeder refuses a non-finite cached Gaussian (no run produces one).
DOUBLES = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 5e-324, -1.5, 1e308]
)


def legacy(rs):
    """NumPy's own (slow) view of a RandomState: kind, key as a list, pos, has_gauss,
    cached_gaussian."""
    kind, key, pos, has, gauss = rs.get_state()
    return kind, key.tolist(), pos, has, gauss


def as_legacy(state):
    return (
        state["kind"],
        state["key"].numpy().view(np.uint32).tolist(),
        state["pos"],
        state["has_gauss"],
        state["cached_gaussian"],
    )


#: What reads an object's memory: ctypes (imported, or NumPy's ``.ctypes`` of a bit generator) and
#: its reads at an address.
MEMORY_READS = {"ctypes", "from_address", "string_at"}


def test_no_module_reads_an_objects_memory():
    """RNG states go through getstate/get_state/get_rng_state only: nothing in seeder imports or
    uses ctypes."""
    found = []
    for path in sorted((REPO_ROOT / "seeder").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            else:
                continue
            where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
            found += [f"{where} {n}" for n in names if n.split(".")[0] in MEMORY_READS]
    assert found == []


# a step that moves a RandomState: draws of every kind, including the Gaussian cache, and reseeds
STEP = st.one_of(
    st.tuples(st.just("uniform"), st.integers(0, 700)),
    st.tuples(st.just("randn"), st.integers(0, 5)),
    st.tuples(st.just("seed"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("set"), st.integers(0, 624), st.sampled_from([0, 1]), DOUBLES),
)


def move(rs, step):
    if step[0] == "uniform":
        rs.random_sample(step[1])
    elif step[0] == "randn":
        rs.randn(step[1])
    elif step[0] == "seed":
        rs.seed(step[1])
    else:  # any legal state, even has_gauss=0 with a stale cached value
        rs.set_state(("MT19937", list(range(1000, 1624)), step[1], step[2], step[3]))


@pytest.mark.parametrize("which", ["global", "instance"])
@FAST
@given(steps=st.lists(STEP, max_size=6), later=st.lists(STEP, min_size=1, max_size=4))
def test_randomstate_round_trip_is_bit_identical(which, steps, later):
    saved = np.random.get_state()
    try:
        rs = np.random.mtrand._rand if which == "global" else np.random.RandomState(7)
        adapter = NumpyRandomStateAdapter(None if which == "global" else rs)
        for step in steps:
            move(rs, step)
        want = legacy(rs)
        state = adapter.get_state()
        assert as_legacy(state) == want and str(state["cached_gaussian"]) == str(
            want[4]
        )  # -0.0 kept
        adapter.check_state(state, "numpy")
        for step in later:
            move(rs, step)
        adapter.set_state(state)
        assert legacy(rs) == want and str(rs.get_state()[4]) == str(want[4])
        ref = np.random.RandomState()
        ref.set_state(tuple(want))
        assert np.array_equal(rs.randn(3), ref.randn(3)) and np.array_equal(
            rs.random_sample(5), ref.random_sample(5)
        )
    finally:
        np.random.set_state(saved)


def test_gaussian_cache_after_an_odd_randn_survives_a_round_trip():
    adapter = NumpyRandomStateAdapter()
    np.random.seed(3)
    np.random.randn(3)  # odd: one Gaussian cached
    state = adapter.get_state()
    assert state["has_gauss"] == 1
    want = np.random.randn(4)
    adapter.set_state(state)
    assert np.array_equal(np.random.randn(4), want)


def test_a_state_built_from_get_state_loads_exactly():
    # the key from get_state() as int32 bits, the other fields as NumPy's own types
    np.random.seed(11)
    np.random.randn(1)
    kind, key, pos, has, gauss = np.random.get_state()
    old = {
        "kind": kind,
        "key": torch.from_numpy(key.view(np.int32).copy()),
        "pos": int(pos),
        "has_gauss": int(has),
        "cached_gaussian": float(gauss),
    }
    want = np.random.randn(5)
    np.random.seed(0)
    NumpyRandomStateAdapter().set_state(old)
    assert np.array_equal(np.random.randn(5), want)


def test_keys_that_are_views_or_other_layouts_load_exactly():
    adapter = NumpyRandomStateAdapter()
    np.random.seed(5)
    state = adapter.get_state()
    want = legacy(np.random.mtrand._rand)
    strided = torch.zeros(1248, dtype=torch.int32)
    strided[::2] = state["key"]
    np.random.seed(6)
    adapter.set_state({**state, "key": strided[::2], "has_gauss": True})
    assert legacy(np.random.mtrand._rand)[:3] == want[:3]


def test_global_adapter_follows_set_bit_generator():
    saved = np.random.get_bit_generator()
    try:
        np.random.set_bit_generator(np.random.MT19937(99))
        adapter = NumpyRandomStateAdapter()
        assert as_legacy(adapter.get_state()) == legacy(np.random.mtrand._rand)
    finally:
        np.random.set_bit_generator(saved)


def test_subclasses_and_other_bit_generators_take_numpys_path():
    class Mine(np.random.RandomState):
        pass

    rs = Mine(4)
    rs.randn(1)
    adapter = NumpyRandomStateAdapter(rs)
    state = adapter.get_state()
    assert as_legacy(state) == legacy(rs)
    rs.random_sample(9)
    adapter.set_state(state)
    assert as_legacy(state) == legacy(rs)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("pos", 625, "pos must be an int in [0, 624]"),
        ("has_gauss", 2, "has_gauss must be an int in [0, 1]"),
        ("cached_gaussian", 1, "cached_gaussian must be a finite float"),
        ("key", torch.zeros(623, dtype=torch.int32), "expected an int32 tensor of shape (624,)"),
    ],
)
def test_corrupt_numpy_state_is_rejected_before_anything_changes(field, value, message):
    adapter = NumpyRandomStateAdapter()
    state = adapter.get_state()
    before = legacy(np.random.mtrand._rand)
    with pytest.raises(
        StateError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        adapter.check_state({**state, field: value}, "numpy")
    assert legacy(np.random.mtrand._rand) == before


@pytest.mark.parametrize("bad", [2**32, -1, 1.0, "1"])
def test_python_words_out_of_range_are_rejected(bad):
    rng = random.Random(1)
    adapter = PythonRandomAdapter(rng)
    version, words, gauss = rng.getstate()  # random.getstate()'s own form, which loads too
    words = list(words)
    words[100] = bad
    before = rng.getstate()
    with pytest.raises(StateError, match=r"Mersenne Twister words must be ints in \[0, 2\*\*32\)"):
        adapter.check_state({"version": version, "state": words, "gauss_next": gauss}, "python")
    assert rng.getstate() == before


def test_python_round_trip_from_a_list():
    rng = random.Random(2)
    rng.gauss(0, 1)
    adapter = PythonRandomAdapter(rng)
    version, words, gauss = rng.getstate()
    state = {
        "version": version,
        "state": list(words),
        "gauss_next": gauss,
    }  # random.getstate()'s form, as a list
    adapter.check_state(state, "python")
    want = [rng.random() for _ in range(5)] + [rng.gauss(0, 1)]
    adapter.set_state(state)
    assert [rng.random() for _ in range(5)] + [rng.gauss(0, 1)] == want


@FAST
@given(seed=st.integers(0, 2**128 - 1), n=st.integers(1, 9))
def test_seed_sequence_words_match_numpy(seed, n):
    assert (
        seedseq.seed_sequence_words(seed, n)
        == np.random.SeedSequence(seed).generate_state(n).tolist()
    )


@FAST
@given(seed=st.integers(0, 2**128 - 1))
def test_pcg64_state_matches_numpy(seed):
    assert pcg64_state(seed) == np.random.PCG64(np.random.SeedSequence(seed)).state


@pytest.mark.parametrize(
    "kind",
    [np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64, np.random.MT19937],
)
@pytest.mark.parametrize("seed", [0, 2**32, 2**64 - 1, 2**200])
def test_generator_reseed_equals_a_fresh_bit_generator(kind, seed):
    gen = np.random.Generator(kind(1))
    gen.standard_normal(3)
    NumpyGeneratorAdapter(gen).seed(seed)
    fresh = np.random.Generator(kind(np.random.SeedSequence(seed)))
    assert np.array_equal(gen.integers(0, 2**62, 8), fresh.integers(0, 2**62, 8))
    assert fast_seeding_state(kind) is (pcg64_state if kind is np.random.PCG64 else None)


@FAST
@given(
    master=st.integers(0, 2**63 - 1),
    domain=st.integers(0, 5),
    key=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4),
    words=st.integers(1, 3),
)
def test_stream_seeds_fast_paths_match_seed_sequence(master, domain, key, words):
    task, epoch, rank, stream = key
    fast = derive.stream_seeds(master, domain, task, epoch, rank, words).seed(stream)
    ref = np.random.SeedSequence(
        master, spawn_key=(domain, task, epoch, rank, stream)
    ).generate_state(words, np.uint64)
    assert fast == [int(w) for w in ref]
    assert derive.stream_seeds(master, domain, task, epoch, rank).seed(stream)[0] == int(ref[0])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    master=st.integers(0, 2**63 - 1),
    key=st.lists(st.integers(0, 2**32 - 1), min_size=4, max_size=4),
    words=st.integers(1, 3),
    jumps=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3),
)
def test_block_derivation_matches_seed_sequence(master, key, words, jumps):
    """Seeds from cached blocks (consecutive streams, jumps anywhere, back) equal NumPy's
    SeedSequence's."""
    domain, task, epoch, rank = key
    blocks = derive.stream_seeds(master, domain, task, epoch, rank, words)
    streams = [
        s for j in jumps for s in (j, min(j + 1, 2**32 - 1), min(j + 300, 2**32 - 1), max(j - 1, 0))
    ]
    vector = blocks.seeds(np.array(streams, dtype=np.uint32)).tolist()
    for stream, row in zip(streams, vector):
        ref = np.random.SeedSequence(
            master, spawn_key=(domain, task, epoch, rank, stream)
        ).generate_state(words, np.uint64)
        assert blocks.at(stream) == row == [int(w) for w in ref]


@pytest.mark.parametrize("per_batch", [False, True])
def test_copies_put_back_every_global_rng_exactly(per_batch):
    """copy_state / put_back (public) and keep() (per batch) of python, NumPy (Gaussian caches
    set) and torch: the same draws afterwards."""
    from seeder._seeding.rngbase import keep_states, put_back_states, restore_states, save_states

    adapters = global_adapters()[:3]

    def draws():
        return (
            random.random(),
            random.gauss(0, 1),
            np.random.random(),
            np.random.standard_normal(),
            torch.rand(2).tolist(),
        )

    random.seed(3)
    random.gauss(0, 1)  # gauss_next set
    np.random.seed(4)
    np.random.standard_normal()  # has_gauss set
    saved = keep_states(adapters) if per_batch else save_states(adapters)
    want = draws()
    for a in adapters:
        a.seed(99)
    draws()
    assert (restore_states if per_batch else put_back_states)(saved, strict=True) == []
    assert draws() == want


def test_numpy_put_back_after_the_global_bit_generator_was_replaced():
    """A per-batch copy of NumPy's global RNG goes into the bit generator global at put-back."""
    adapter = NumpyRandomStateAdapter()
    original = np.random.get_bit_generator()
    np.random.seed(8)
    np.random.standard_normal()
    restore = adapter.keep()
    want = np.random.get_state()
    np.random.set_bit_generator(np.random.MT19937(1))
    try:
        restore()
        got = np.random.get_state()
        assert got[0] == want[0] and np.array_equal(got[1], want[1]) and got[2:] == want[2:]
    finally:
        np.random.set_bit_generator(original)


def test_python_state_of_a_random_or_a_subclass_is_getstates():
    class Sub(random.Random):
        pass

    for rng in (random.Random(3), Sub(3)):
        rng.random()
        rng.gauss(0, 1)
        adapter = PythonRandomAdapter(rng)
        state = adapter.get_state()
        version, words, gauss = rng.getstate()
        assert state["key"].dtype == torch.int32 and state["key"].numpy().view(
            np.uint32
        ).tolist() == list(words[:624])
        assert (state["version"], state["pos"], state["gauss_next"]) == (version, words[624], gauss)
        want = [rng.random() for _ in range(3)] + [rng.gauss(0, 1)]
        adapter.check_state(state, "python")
        adapter.set_state(state)
        assert [rng.random() for _ in range(3)] + [rng.gauss(0, 1)] == want


def test_a_failed_load_leaves_every_rng_as_the_last_load_set_it():
    """state_dict, load_state_dict (validation, rollback copies, a failed load put back) through
    the public state APIs: the draws after a refused load are those after the good one."""
    import seeder

    s = seeder.Seeder()
    s.init(5)
    s.register_generator(random.Random(1))
    s.register_generator(np.random.RandomState(2))
    random.gauss(0, 1)
    np.random.standard_normal()
    state = s.state_dict()
    want = (random.random(), np.random.random(), torch.rand(1).item())
    s.load_state_dict(state)
    bad = {**state, "rngs": {**state["rngs"], "torch": state["rngs"]["torch"].clone()}}
    bad["rngs"]["torch"][12:16] = 0  # 'seeded' 0: refused before anything is set
    with pytest.raises(StateError):
        s.load_state_dict(bad)
    assert (random.random(), np.random.random(), torch.rand(1).item()) == want


PY_STEP = st.one_of(
    st.tuples(st.just("random"), st.integers(0, 700)),
    st.tuples(st.just("gauss"), st.integers(0, 3)),
    st.tuples(st.just("bits"), st.sampled_from([32, 32 * 624, 32 * 625])),
    st.tuples(st.just("seed"), st.integers(0, 2**64)),
)


def move_python(rng, step):
    if step[0] == "random":
        for _ in range(step[1]):
            rng.random()
    elif step[0] == "gauss":
        for _ in range(step[1]):
            rng.gauss(0, 1)
    elif step[0] == "bits":
        rng.getrandbits(step[1])
    else:
        rng.seed(step[1])


@FAST
@given(before=st.lists(PY_STEP, max_size=4), drawn=st.lists(PY_STEP, min_size=1, max_size=4))
def test_python_keep_and_watcher_match_getstate(before, drawn):
    """What keep() puts back is getstate()'s state; the watcher sees any draw."""
    rng = random.Random(3)
    adapter = PythonRandomAdapter(rng)
    for step in before:
        move_python(rng, step)
    want, watch = rng.getstate(), adapter.watcher()
    restore, seen = adapter.keep(), watch()
    for step in drawn:
        move_python(rng, step)
    assert watch() != seen or rng.getstate() == want  # a draw is seen
    restore()
    assert rng.getstate() == want and watch() == seen


@FAST
@given(
    before=st.lists(STEP, max_size=4),
    drawn=st.lists(STEP, min_size=1, max_size=4),
    which=st.sampled_from(["global", "instance"]),
)
def test_numpy_keep_and_watcher_match_get_state(before, drawn, which):
    """What keep() puts back is get_state()'s state (key, position, Gaussian cache); the watcher
    sees any draw."""
    saved = np.random.get_state()
    try:
        rs = np.random.mtrand._rand if which == "global" else np.random.RandomState(7)
        adapter = NumpyRandomStateAdapter(None if which == "global" else rs)
        for step in before:
            move(rs, step)
        want, watch = legacy(rs), adapter.watcher()
        restore, seen = adapter.keep(), watch()
        for step in drawn:
            move(rs, step)
        assert watch() != seen or legacy(rs) == want  # a draw is seen
        restore()
        assert legacy(rs) == want and str(rs.get_state()[4]) == str(want[4]) and watch() == seen
    finally:
        np.random.set_state(saved)
