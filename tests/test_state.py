"""Seeder.state_dict / load_state_dict: round trips, every corruption leaves every RNG unchanged,
ranks, world change."""

from __future__ import annotations

import copy
import io
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from seeder import DistributedSampler, Seeder, SeederWarning, StateError, digest
from seeder._seeding.default import default_seeder
from seeder._state.format import GATHERED_FORMAT


class Perturbation:
    """NVIDIA seeder's example generator, with state_dict/load_state_dict."""

    def __init__(self):
        self._rng = random.Random()

    def reseed_rng(self, seed):
        self._rng.seed(seed)

    def state_dict(self):
        version, internal, gauss = self._rng.getstate()
        return {
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss": gauss,
        }

    def check_state_dict(self, state):
        if not isinstance(state, dict) or set(state) != {"version", "state", "gauss"}:
            raise StateError("Perturbation state must have version, state, gauss")

    def load_state_dict(self, state):
        self._rng.setstate((state["version"], tuple(state["state"].tolist()), state["gauss"]))


class PlainPerturbation:
    """NVIDIA seeder's example generator exactly: a reseed method and nothing else."""

    def __init__(self):
        self._rng = random.Random()

    def reseed_rng(self, seed):
        self._rng.seed(seed)


class Setup:
    """A seeder with one generator of every kind registered."""

    def __init__(self, seed=1234, **init):
        self.s = Seeder()
        self.s.init(seed, **init)
        self.py = random.Random()
        self.npg = np.random.default_rng()
        self.nprs = np.random.RandomState()
        self.tg = torch.Generator()
        self.pert = Perturbation()
        for g in (self.py, self.npg, self.nprs, self.tg, self.pert.reseed_rng):
            self.s.register_generator(g)

    def draw(self):
        """One value from every RNG the seeder knows (advances them all)."""
        return (
            random.random(),
            float(np.random.random()),
            float(torch.rand(1)),
            self.py.random(),
            float(self.npg.random()),
            float(self.nprs.random_sample()),
            float(torch.rand(1, generator=self.tg)),
            self.pert._rng.random(),
        )

    def native(self):
        """Every RNG state read through its own API (not through seeder's adapters)."""
        return digest(
            [
                random.getstate(),
                np.random.get_state(),
                torch.get_rng_state(),
                self.py.getstate(),
                self.npg.bit_generator.state,
                self.nprs.get_state(),
                self.tg.get_state(),
                self.pert._rng.getstate(),
            ]
        )


def roundtrip(state, weights_only=True):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=weights_only)


@pytest.fixture
def setup():
    st = Setup()
    st.s.reseed(1, 0)
    st.draw()
    return st


def test_weights_only_round_trip_continues_every_stream(setup):
    state = roundtrip(setup.s.state_dict())
    expected = [setup.draw() for _ in range(3)]
    setup.s.load_state_dict(state)
    assert [setup.draw() for _ in range(3)] == expected


def test_resume_skips_the_saved_reseed_and_later_epochs_match():
    a = Setup()
    a.s.reseed(1, 0)
    a.draw()
    state = roundtrip(a.s.state_dict())
    a.draw()
    a.s.reseed(1, 1)
    uninterrupted = [a.draw() for _ in range(2)]

    b = Setup()  # a fresh "process": same registrations, different live states
    b.s.reseed(0, 0)
    b.s.load_state_dict(state)
    b.s.reseed(1, 0)  # skipped: the loaded state continues epoch 0
    b.draw()
    b.s.reseed(1, 1)
    assert [b.draw() for _ in range(2)] == uninterrupted


@pytest.mark.parametrize(
    "make",
    [
        random.Random,
        np.random.default_rng,
        lambda: np.random.Generator(np.random.SFC64()),
        lambda: np.random.Generator(np.random.MT19937()),
        lambda: np.random.Generator(np.random.Philox()),
        np.random.RandomState,
        torch.Generator,
    ],
    ids=["Random", "PCG64", "SFC64", "MT19937", "Philox", "RandomState", "torch"],
)
def test_each_generator_object_round_trips(make):
    s = Seeder()
    s.init(9)
    gen = make()
    s.register_generator(gen)
    s.reseed(1, 3)
    draw = {
        random.Random: lambda: gen.random(),
        torch.Generator: lambda: float(torch.rand(1, generator=gen)),
    }.get(
        type(gen),
        lambda: (
            float(gen.random()) if hasattr(gen, "bit_generator") else float(gen.random_sample())
        ),
    )
    draw()
    state = roundtrip(s.state_dict())
    expected = [draw() for _ in range(5)]
    s.load_state_dict(state)
    assert [draw() for _ in range(5)] == expected


def test_owner_protocol_callable_is_saved_and_restored(setup):
    state = setup.s.state_dict()
    assert any(
        k.startswith("generator.") and isinstance(v, dict) and "gauss" in v
        for k, v in state["participants"].items()
    )
    expected = [setup.pert._rng.random() for _ in range(4)]
    setup.s.load_state_dict(roundtrip(state))
    assert [setup.pert._rng.random() for _ in range(4)] == expected


def test_plain_callable_warns_once_and_module_owner_does_not_count():
    s = Seeder()
    s.init(3)
    pert = PlainPerturbation()
    s.register_generator(pert.reseed_rng)

    class Aug(torch.nn.Module):
        def reseed_rng(self, seed):
            pass

    aug = Aug()
    s.register_generator(aug.reseed_rng)
    s.reseed(1, 0)
    with pytest.warns(SeederWarning, match="plain callable") as rec:
        state = s.state_dict()
    assert len(rec) == 2 and state["participants"] == {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.state_dict()  # once per generator


def test_state_is_only_tensors_and_plain_values(setup):
    def walk(x):
        if isinstance(x, dict):
            assert all(isinstance(k, str) for k in x)
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        else:
            assert x is None or isinstance(x, (torch.Tensor, int, float, str, bool)), type(x)

    walk(setup.s.state_dict())


# --------------------------------------------------------------------------- corruption: nothing
# changes


def _set(path, value):
    def corrupt(state):
        target = state
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value(target[path[-1]]) if callable(value) else value
        return state

    return corrupt


def _tuple_form(fn):
    """The global Python RNG's state in ``random.getstate()``'s own form (which loads too), then
    ``fn`` on its words."""

    def corrupt(state):
        py = state["rngs"]["python"]
        words = tuple(py["key"].numpy().view(np.uint32).tolist()) + (py["pos"],)
        state["rngs"]["python"] = {"version": 3, "state": fn(words), "gauss_next": py["gauss_next"]}
        return state

    return corrupt


def _delete(path):
    def corrupt(state):
        target = state
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return state

    return corrupt


def _gen_key(state, kind):
    """The participants key of the registered generator whose state looks like ``kind``."""
    for key, value in state["participants"].items():
        if kind == "torch" and isinstance(value, torch.Tensor):
            return key
        if isinstance(value, dict):
            if kind == "pcg" and value.get("bit_generator") == "PCG64":
                return key
            if kind == "randomstate" and value.get("kind") == "MT19937":
                return key
            if kind == "random" and "gauss_next" in value:
                return key
            if kind == "owner" and "gauss" in value:
                return key
    raise KeyError(kind)


def _in_gen(kind, sub, value):
    def corrupt(state):
        key = _gen_key(state, kind)
        if sub is None:
            state["participants"][key] = (
                value(state["participants"][key]) if callable(value) else value
            )
        else:
            state["participants"][key][sub] = value
        return state

    return corrupt


CORRUPTIONS = {
    "not_a_dict": lambda s: [s],
    "wrong_format": _set(["format"], "lightning"),
    "version": _set(["version"], 99),
    "derivation_version": _set(["derivation_version"], 0),
    "missing_key": _delete(["rngs"]),
    "extra_key": _set(["epoch"], 3),
    "master_seed_negative": _set(["master_seed"], -1),
    "master_seed_str": _set(["master_seed"], "1234"),
    "master_seed_huge": _set(["master_seed"], 2**200),
    "world_size": _set(["world_size"], 2),
    "world_size_type": _set(["world_size"], 1.0),
    "rank": _set(["rank"], 1),
    "last_reseed_shape": _set(["last_reseed"], [1]),
    "last_reseed_negative": _set(["last_reseed"], [1, -1]),
    "rngs_not_dict": _set(["rngs"], []),
    "rngs_missing": _delete(["rngs", "numpy"]),
    "rngs_extra": _set(["rngs", "cuda"], []),
    "python_version": _set(["rngs", "python", "version"], 2),
    "python_tensor": _tuple_form(lambda w: torch.tensor(w)),
    "python_list_short": _tuple_form(lambda w: list(w)[:-2]),
    "python_float_word": _tuple_form(lambda w: (float(w[0]),) + w[1:]),
    "python_str_word": _tuple_form(lambda w: w[:5] + ("7",) + w[6:]),
    "python_shape": _tuple_form(lambda w: w[:-1]),
    "python_word_high": _tuple_form(lambda w: (2**40,) + w[1:]),
    "python_word_negative": _tuple_form(lambda w: w[:3] + (-1,) + w[4:]),
    "python_index": _tuple_form(lambda w: w[:-1] + (700,)),
    "python_tuple_zeros": _tuple_form(lambda w: (0,) * 624 + (624,)),
    "python_key_dtype": _set(["rngs", "python", "key"], lambda t: t.to(torch.int64)),
    "python_key_short": _set(["rngs", "python", "key"], lambda t: t[:-1].clone()),
    "python_key_list": _set(["rngs", "python", "key"], lambda t: t.tolist()),
    "python_key_zeros": _set(["rngs", "python", "key"], lambda t: torch.zeros_like(t)),
    "python_pos": _set(["rngs", "python", "pos"], 625),
    "python_pos_bool": _set(["rngs", "python", "pos"], True),
    "python_both_forms": _set(["rngs", "python", "state"], (1,) * 625),
    "python_gauss": _set(["rngs", "python", "gauss_next"], "0.5"),
    "python_keys": _delete(["rngs", "python", "gauss_next"]),
    "numpy_kind": _set(["rngs", "numpy", "kind"], "PCG64"),
    "numpy_key_shape": _set(["rngs", "numpy", "key"], lambda t: t[:100]),
    "numpy_key_dtype": _set(["rngs", "numpy", "key"], lambda t: t.to(torch.int64)),
    "numpy_pos": _set(["rngs", "numpy", "pos"], 625),
    "numpy_has_gauss": _set(["rngs", "numpy", "has_gauss"], 2),
    "numpy_cached": _set(["rngs", "numpy", "cached_gaussian"], None),
    "torch_not_tensor": _set(["rngs", "torch"], lambda t: t.tolist()),
    "torch_dtype": _set(["rngs", "torch"], lambda t: t.to(torch.int64)),
    "torch_size": _set(["rngs", "torch"], lambda t: t[:-8]),
    "participants_not_dict": _set(["participants"], []),
    "participant_missing": lambda s: (s["participants"].pop(_gen_key(s, "torch")), s)[1],
    # a state for a participant not built yet waits for it: tests/test_pending.py
    "gen_random": _in_gen("random", "version", 7),
    "gen_pcg_name": _in_gen("pcg", "bit_generator", "MT19937"),
    "gen_pcg_garbage": _in_gen("pcg", "state", {"state": "x", "inc": 1}),
    "gen_randomstate": _in_gen("randomstate", "pos", -1),
    "gen_torch": _in_gen("torch", None, lambda t: t[:10]),
    "owner_check": _in_gen("owner", None, {"nope": 1}),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_every_corruption_raises_and_changes_nothing(setup, name):
    state = roundtrip(setup.s.state_dict())
    setup.draw()  # live states now differ from the saved ones
    before = (setup.native(), setup.s.get_master_seed(), setup.s.last_reseed)
    bad = CORRUPTIONS[name](copy.deepcopy(state))
    with pytest.raises((StateError, TypeError)) as info:
        setup.s.load_state_dict(bad)
    assert str(info.value)
    assert (setup.native(), setup.s.get_master_seed(), setup.s.last_reseed) == before
    with pytest.raises((StateError, TypeError)):
        setup.s.check_state_dict(bad)
    setup.s.load_state_dict(state)  # the valid state still loads afterwards


def test_numpy_generator_words_out_of_range_are_rejected():
    s = Seeder()
    s.init(2)
    gen = np.random.Generator(np.random.MT19937())
    s.register_generator(gen)
    s.reseed(1, 0)
    state = roundtrip(s.state_dict())
    key = state["participants"]["generator.1"]["state"]["key"]["__ndarray__"]
    key[0] = 2**33
    before = gen.bit_generator.state["state"]["key"].tolist()
    with pytest.raises(StateError, match="out of range"):
        s.load_state_dict(state)
    assert gen.bit_generator.state["state"]["key"].tolist() == before


def test_fork_rng_leaves_participants_alone(setup):
    pos = Position()
    setup.s.join(pos)
    with setup.s.fork_rng():
        pos.index = 5  # a sampler moving inside the block keeps its position: it is not an RNG
    assert pos.index == 5


def test_failure_inside_apply_rolls_everything_back():
    class Fragile:
        """Owner protocol without check_state_dict whose load fails after the global RNGs were
        set."""

        def __init__(self):
            self.value = 0
            self.fail = False

        def reseed_rng(self, seed):
            self.value = seed

        def state_dict(self):
            return {"value": self.value}

        def load_state_dict(self, state):
            self.value = -1  # changes something, then fails (once)
            if self.fail:
                self.fail = False
                raise RuntimeError("cannot load")
            self.value = state["value"]

    st = Setup()
    fragile = Fragile()
    st.s.register_generator(fragile.reseed_rng)
    st.s.reseed(1, 0)
    state = st.s.state_dict()
    st.draw()
    fragile.value = 5
    before = st.native()
    fragile.fail = True
    with pytest.raises(
        StateError, match=r"is as it was before load_state_dict \(put back: generator\.\d+\)$"
    ):
        st.s.load_state_dict(state)
    assert st.native() == before and fragile.value == 5


def test_registration_order_mismatch_is_an_error():
    a = Seeder()
    a.init(1)
    a.register_generator(random.Random())
    a.register_generator(lambda seed: None)
    a.reseed(1, 0)
    with pytest.warns(SeederWarning, match="plain callable"):
        state = a.state_dict()
    b = Seeder()
    b.init(1)
    b.register_generator(lambda seed: None)
    b.register_generator(random.Random())  # other stream: would give other seeds from now on
    with pytest.raises(StateError, match="same order"):
        b.load_state_dict(state)


def test_load_requires_init_and_bool_flag():
    with pytest.raises(RuntimeError, match="before seeder.init"):
        Seeder().load_state_dict({})
    s = Seeder()
    s.init(1)
    with pytest.raises(TypeError, match="allow_world_change"):
        s.load_state_dict(s.state_dict(), allow_world_change=1)


# ------------------------------------------------------------------------------- many ranks, world
# change


def _rank_states(world, seed=77, epoch=2):
    states = []
    for rank in range(world):
        s = Seeder()
        s.init(seed, ngpus=world, rank=rank)
        s.reseed(1, epoch)
        states.append(roundtrip(s.state_dict()))
    return states


def test_gathered_form_loads_this_ranks_entry():
    states = _rank_states(3)
    gathered = roundtrip(
        {"format": GATHERED_FORMAT, "version": 1, "world_size": 3, "ranks": states}
    )
    s = Seeder()
    s.init(77, ngpus=3, rank=1)
    s.reseed(1, 2)
    expected = float(torch.rand(1))
    s.reseed(0, 0)
    s.load_state_dict(gathered)
    assert float(torch.rand(1)) == expected
    # each entry is the rank's own state: rank 1's stream, not rank 0's
    assert not torch.equal(states[0]["rngs"]["torch"], states[1]["rngs"]["torch"])


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda g: g["ranks"].pop(),
        lambda g: g["ranks"].reverse(),
        lambda g: g["ranks"][2].__setitem__("master_seed", 5),
        lambda g: g.__setitem__("version", 2),
        lambda g: g.__setitem__("extra", 1),
        lambda g: g["ranks"][1].__setitem__("rngs", {}),
    ],
    ids=["short", "order", "mixed_runs", "version", "extra_key", "own_entry_bad"],
)
def test_corrupt_gathered_state_changes_nothing(corrupt):
    gathered = {"format": GATHERED_FORMAT, "version": 1, "world_size": 3, "ranks": _rank_states(3)}
    corrupt(gathered)
    s = Seeder()
    s.init(77, ngpus=3, rank=1)
    s.reseed(1, 0)
    before = digest([random.getstate(), np.random.get_state(), torch.get_rng_state()])
    with pytest.raises(StateError):
        s.load_state_dict(gathered)
    assert digest([random.getstate(), np.random.get_state(), torch.get_rng_state()]) == before


def test_gather_without_process_group_one_process_and_error_for_many():
    s = Seeder()
    s.init(5)
    s.reseed(1, 0)
    g = roundtrip(s.gather_state_dict())
    assert g["format"] == GATHERED_FORMAT and g["ranks"][0]["rank"] == 0
    with pytest.raises(ValueError, match="dst"):
        s.gather_state_dict(dst=1)
    t = Seeder()
    t.init(5, ngpus=2, rank=0)
    with pytest.raises(RuntimeError, match="process group"):
        t.gather_state_dict()


def assert_world_docs(text):
    """The message links the page that gives every way to resume on another world size, and the
    page names them: the next epoch boundary, an elastic loader, a sharded stream."""
    assert "see docs/checkpoints.md#another-world-size" in text
    page = (Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md").read_text()
    section = page.split("## Another world size", 1)[1].split("\n## ", 1)[0]
    for way in ("allow_world_change=True", "seeder.ElasticDataLoader", "num_shards"):
        assert way in section


@pytest.mark.parametrize("gathered", [False, True])
def test_world_change_is_an_error_unless_allowed(gathered):
    states = _rank_states(2, seed=77, epoch=4)
    state = (
        {"format": GATHERED_FORMAT, "version": 1, "world_size": 2, "ranks": states}
        if gathered
        else states[0]
    )
    s = Seeder()
    s.init(None)  # the checkpoint's master seed wins
    s.reseed(0, 0)
    before = digest([random.getstate(), np.random.get_state(), torch.get_rng_state()])
    with pytest.raises(StateError, match="allow_world_change=True") as refused:
        s.load_state_dict(state)
    text = str(refused.value)  # the two ways on, and the page with the others
    assert "continue from the next epoch boundary" in text and "resume with 2 processes" in text
    assert_world_docs(text)
    s.load_state_dict(state, allow_world_change=True)
    assert (
        digest([random.getstate(), np.random.get_state(), torch.get_rng_state()]) == before
    )  # RNGs not taken
    assert s.get_master_seed() == 77 and s.last_reseed == (1, 4)
    s.reseed(1, 5)  # the next epoch, derived afresh for this world
    fresh = Seeder()
    fresh.init(77)
    assert s.get_seed(1, 5) == fresh.get_seed(1, 5)
    got = float(torch.rand(1))
    fresh.reseed(1, 5)
    assert float(torch.rand(1)) == got


def test_world_change_still_validates_the_header():
    state = _rank_states(2)[0]
    state["derivation_version"] = 0
    s = Seeder()
    s.init(1)
    with pytest.raises(StateError, match="derivation"):
        s.load_state_dict(state, allow_world_change=True)
    assert s.get_master_seed() == 1


# -------------------------------------------------------------------------------------------
# fork_rng


def test_fork_rng_restores_everything_even_on_exception(setup):
    before = setup.native()
    last = setup.s.last_reseed
    with pytest.raises(KeyError):
        with setup.s.fork_rng():
            setup.draw()
            setup.s.reseed(1, 9)
            setup.draw()
            raise KeyError("boom")
    assert setup.native() == before and setup.s.last_reseed == last
    with setup.s.fork_rng():
        inside = setup.draw()
    assert setup.draw() == inside


def test_fork_rng_before_init_and_stateless_warning():
    s = Seeder()
    random.seed(1)
    with s.fork_rng():
        random.random()
    assert random.random() == random.Random(1).random()
    s.init(2)
    s.register_generator(PlainPerturbation().reseed_rng)
    with pytest.warns(SeederWarning, match="cannot be restored"):
        with s.fork_rng():
            s.reseed(1, 0)


def test_module_level_names(fresh_default):
    sd = fresh_default
    sd.init(11)
    sd.reseed(1, 0)
    with sd.fork_rng():
        torch.rand(3)
    g = sd.gather_state_dict()
    default_seeder().check_state_dict(g)
    sd.load_state_dict(g)
    assert callable(sd.digest)


class Position:
    """An attached participant with state (what a sampler does), weakly held."""

    seeder_kind = "position"

    def __init__(self):
        self.epoch, self.index = 0, 0

    def seeder_reseed(self, seeder, task_id, epoch):
        self.epoch, self.index = epoch, 0

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index}

    def check_state_dict(self, state):
        if (
            not isinstance(state, dict)
            or not isinstance(state.get("index"), int)
            or state["index"] < 0
        ):
            raise StateError("position state needs a non-negative int index")

    def load_state_dict(self, state):
        self.epoch, self.index = state["epoch"], state["index"]


def test_attached_participant_round_trip_and_validation(setup):
    pos = Position()
    setup.s.join(pos)
    setup.s.reseed(1, 3)
    pos.index = 17
    state = roundtrip(setup.s.state_dict())
    assert state["participants"]["position.0"] == {"epoch": 3, "index": 17}
    pos.index = 40
    bad = copy.deepcopy(state)
    bad["participants"]["position.0"]["index"] = -1
    before = setup.native()
    with pytest.raises(StateError, match="position"):
        setup.s.load_state_dict(bad)
    assert pos.index == 40 and setup.native() == before
    setup.s.load_state_dict(state)
    assert (pos.epoch, pos.index) == (3, 17)
    setup.s.reseed(1, 3)  # skipped: the position continues
    assert pos.index == 17


def test_the_saved_participants_follow_joins_leaves_and_a_participant_that_is_gone():
    s = Seeder()
    s.init(1)
    first, second = Position(), Position()
    s.join(first)
    s.join(second)
    assert (
        list(s.stateful()) == ["position.0", "position.1"] and s.stateful()["position.1"] is second
    )
    del (
        first
    )  # held weakly: it leaves when it is gone, and the other one is position.0 from then on
    import gc

    gc.collect()
    assert list(s.stateful()) == ["position.0"] and s.stateful()["position.0"] is second
    rng = random.Random()
    s.register_generator(rng)
    assert list(s.stateful()) == ["position.0", "generator.1"] and [
        g.gen for g in s.generators()
    ] == [rng]
    s.unregister_generator(rng)
    s.leave(second)
    assert s.stateful() == {} and s.generators() == []
    s.reseed(1, 0)
    assert s.state_dict()["participants"] == {}


def test_a_refusal_for_per_rank_participants_names_each_way_on():
    """A sampler keeps one rank's state: the refusal says what allow_world_change and an elastic
    loader each do."""
    two = Seeder()
    two.init(5, ngpus=2, rank=0)
    kept = DistributedSampler(range(8), seeder=two)
    two.reseed(1, 0)
    state = two.state_dict()
    one = Seeder()
    one.init(5)
    sampler = DistributedSampler(range(8), seeder=one)
    with pytest.raises(StateError, match="world of 2") as refused:
        one.load_state_dict(state)
    text = str(refused.value)
    assert "allow_world_change=True" in text and "continue from the next epoch boundary" in text
    assert_world_docs(text)
    assert kept is not None and sampler is not None
