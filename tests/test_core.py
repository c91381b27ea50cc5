"""Promises 2, 3 and 5 in one process: init, reseed, the registry, and bad input."""

import logging
import random
import warnings

import numpy as np
import pytest
import torch
from helpers import global_rng_fingerprint

import seeder
from seeder import Seeder, SeederWarning
from seeder._seeding.default import default_seeder
from seeder._seeding.derive import Domain, derive_seed, numpy_seed


def draws():
    return (random.random(), float(np.random.rand()), float(torch.rand(1)))


def test_pyt_alias_exposes_same_api():
    import seeder.pyt as pyt

    for name in seeder.__all__:
        assert getattr(pyt, name) is getattr(seeder, name)


def test_nvidia_calls_work_unchanged(fresh_default):
    class Perturbation:
        def __init__(self):
            self._rng = random.Random()

        def reseed_rng(self, seed):
            self._rng.seed(seed)

    perts = [Perturbation(), Perturbation()]
    s = fresh_default
    s.init(master_seed=1234, ngpus=1, local_rank=0)
    assert s.get_master_seed() == 1234
    s.reseed(0, 0)
    for p in perts:
        s.register_generator(p.reseed_rng)
    s.reseed(1, 0)
    first = [p._rng.random() for p in perts]
    assert first[0] != first[1], "two registered generators must not share a stream"
    s.reseed(1, 1)
    s.unregister_generator(
        perts[1].reseed_rng
    )  # a new bound-method object, equal to the registered one
    assert len(default_seeder().participants()) == 1


def test_reseed_seeds_every_global_rng_with_the_derived_seed():
    s = Seeder()
    s.init(42)
    s.reseed(1, 3)
    got = draws()
    seed = derive_seed(42, Domain.RANK, 1, 3, 0, 0)
    assert seed == s.get_seed(1, 3)
    random.seed(seed)
    np.random.seed(numpy_seed(seed))
    torch.manual_seed(seed)
    assert draws() == got


def test_same_seed_same_draws_other_epoch_other_draws():
    s = Seeder()
    s.init(7)
    s.reseed(1, 0)
    a = draws()
    s.init(7)
    s.reseed(1, 0)
    assert draws() == a
    s.reseed(1, 1)
    assert draws() != a
    s.init(8)
    s.reseed(1, 0)
    assert draws() != a


def test_get_seed_touches_no_rng():
    s = Seeder()
    s.init(3)
    before = global_rng_fingerprint()
    s.get_seed(1, 2)
    s.get_seed(1, 2, shared=True)
    assert global_rng_fingerprint() == before


def test_shared_and_per_rank_seeds():
    a, b = Seeder(), Seeder()
    a.init(9, ngpus=2, rank=0)
    b.init(9, ngpus=2, rank=1)
    assert a.get_seed(1, 0) != b.get_seed(1, 0)
    assert a.get_seed(1, 0, shared=True) == b.get_seed(1, 0, shared=True)


def test_rank_discovery_prefers_global_rank(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    s = Seeder()
    s.init(5, ngpus=4, local_rank=1)
    assert (s.rank, s.world_size, s.local_rank) == (3, 4, 1)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    s.init(5, ngpus=4, local_rank=1)
    assert s.rank == 1  # single-node launch: the local rank is the global rank


def test_registered_objects_are_reseeded():
    s = Seeder()
    s.init(11)
    objs = [random.Random(), np.random.default_rng(), np.random.RandomState(), torch.Generator()]
    for o in objs:
        s.register_generator(o)
    shared = random.Random()
    s.register_generator(shared, shared=True)

    def sample():
        return (
            objs[0].random(),
            float(objs[1].random()),
            float(objs[2].rand()),
            float(torch.rand(1, generator=objs[3])),
            shared.random(),
        )

    s.reseed(1, 0)
    first = sample()
    s.reseed(1, 1)
    assert sample() != first
    other = Seeder()
    other.init(11)
    clones = [random.Random(), np.random.default_rng(), np.random.RandomState(), torch.Generator()]
    for o in clones:
        other.register_generator(o)
    other.register_generator(random.Random(), shared=True)
    objs[:] = clones
    other.reseed(1, 0)
    assert sample()[:4] == first[:4]


def test_shared_generator_same_on_every_rank():
    got = []
    for rank in (0, 1):
        s = Seeder()
        s.init(11, ngpus=2, rank=rank)
        calls = []
        s.register_generator(calls.append, shared=True)
        s.register_generator(lambda x, c=calls: c.append(("per-rank", x)))
        s.reseed(1, 5)
        got.append(calls)
    assert got[0][0] == got[1][0]
    assert got[0][1] != got[1][1]


def test_register_after_reseed_seeds_immediately():
    s = Seeder()
    s.init(1)
    s.reseed(1, 0)
    seen = []
    s.register_generator(seen.append)
    assert seen == [s.get_seed(1, 0, stream=1)]


def test_drawn_seed_logged_once_and_from_os_entropy(caplog):
    s = Seeder()
    with caplog.at_level(logging.INFO, logger="seeder"):
        s.init()
    seeds = [r for r in caplog.records if "Using seed:" in r.getMessage()]
    assert len(seeds) == 1 and str(s.get_master_seed()) in seeds[0].getMessage()
    t = Seeder()
    t.init()
    assert s.get_master_seed() != t.get_master_seed()


def test_seeder_seed_env_replays(monkeypatch):
    monkeypatch.setenv("SEEDER_SEED", "987")
    s = Seeder()
    s.init()
    assert s.get_master_seed() == 987
    s.init(5)  # an explicit seed wins over the environment
    assert s.get_master_seed() == 5
    monkeypatch.setenv("SEEDER_SEED", "abc")
    with pytest.raises(ValueError, match="SEEDER_SEED"):
        Seeder().init()


def test_repeated_reseed_warns_once_per_key():
    s = Seeder()
    s.init(1)
    s.reseed(1, 0)
    with pytest.warns(SeederWarning, match=r"reseed\(1, 0\) was already called"):
        s.reseed(1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.reseed(1, 1)


# ------------------------------------------------------------------ bad input, state unchanged
BAD_SEEDS = [True, 1.0, "42", b"1", [1], -1, 2**63, float("nan")]


@pytest.mark.parametrize("bad", BAD_SEEDS)
def test_bad_master_seed_raises_and_changes_nothing(bad):
    s = Seeder()
    s.init(5)
    s.reseed(1, 0)
    before = (global_rng_fingerprint(), s.get_master_seed(), s.last_reseed)
    with pytest.raises((TypeError, ValueError), match="master_seed"):
        s.init(bad)
    assert (global_rng_fingerprint(), s.get_master_seed(), s.last_reseed) == before


@pytest.mark.parametrize(
    "task,epoch", [(-1, 0), (0, -1), (1.0, 0), (0, "1"), (True, 0), (None, 0), (2**32, 0)]
)
def test_bad_task_or_epoch_raises_and_changes_nothing(task, epoch):
    s = Seeder()
    s.init(5)
    s.reseed(1, 0)
    before = (global_rng_fingerprint(), s.last_reseed)
    with pytest.raises((TypeError, ValueError), match="task_id|epoch"):
        s.reseed(task, epoch)
    assert (global_rng_fingerprint(), s.last_reseed) == before


def test_calls_before_init_raise_and_change_nothing():
    s = Seeder()
    before = global_rng_fingerprint()
    for call in (lambda: s.reseed(0, 0), s.get_master_seed, lambda: s.get_seed(0), s.state_dict):
        with pytest.raises(RuntimeError, match=r"before seeder.init\(\)"):
            call()
    assert global_rng_fingerprint() == before


@pytest.mark.parametrize(
    "kwargs",
    [{"ngpus": 0}, {"ngpus": 2.0}, {"local_rank": -1}, {"ngpus": 2, "rank": 2}, {"rank": "0"}],
)
def test_bad_topology_raises(kwargs):
    s = Seeder()
    s.init(1)
    with pytest.raises((TypeError, ValueError)):
        s.init(2, **kwargs)
    assert s.get_master_seed() == 1


@pytest.mark.parametrize("bad", [42, "f", None, object()])
def test_non_callable_generator_rejected(bad):
    s = Seeder()
    s.init(1)
    with pytest.raises(TypeError, match="callable"):
        s.register_generator(bad)
    assert s.participants() == []


def test_unregister_unknown_and_double_register():
    s = Seeder()
    rng = random.Random()
    with pytest.raises(ValueError, match="not registered"):
        s.unregister_generator(rng)
    with pytest.raises(RuntimeError, match="before seeder.init"):
        s.register_generator(rng)  # init would drop it again: registering before init is a mistake
    assert s.participants() == []
    s.init(1)
    s.register_generator(rng)
    with pytest.raises(ValueError, match="already registered"):
        s.register_generator(rng)
    with pytest.raises(TypeError, match="shared"):
        s.register_generator(random.Random(), shared=1)
    assert len(s.participants()) == 1


def test_enforce_reproducibility(caplog):
    from seeder.env import enforce_reproducibility

    old = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    try:
        torch.backends.cudnn.deterministic = False
        with caplog.at_level(logging.INFO, logger="seeder"):
            seed = enforce_reproducibility()
        assert 1 <= seed <= 1_000_000 and f"Using seed: {seed}" in caplog.text
        assert torch.backends.cudnn.deterministic is False
        assert enforce_reproducibility(1234) == 1234
        a = draws()
        enforce_reproducibility(1234)
        assert draws() == a
        assert (
            torch.backends.cudnn.deterministic is True and torch.backends.cudnn.benchmark is False
        )
        with pytest.raises(TypeError):
            enforce_reproducibility("1")
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = old


LAZY_CUDA = """
import torch, seeder
seeder.init(21)
seeder.reseed(1, 0)                 # CUDA is not initialised yet: the seed is queued
x = torch.rand(3, device="cuda")    # first CUDA use
torch.cuda.manual_seed_all(seeder.get_seed(1, 0))
assert torch.equal(torch.rand(3, device="cuda"), x)
states = torch.cuda.get_rng_state_all()
seeder.reseed(1, 1)
assert all(not torch.equal(a, b) for a, b in zip(states, torch.cuda.get_rng_state_all()))
print("ok", torch.cuda.device_count())
"""


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_reseed_seeds_every_cuda_device_also_before_cuda_starts():
    from helpers import run_python

    assert run_python(["-c", LAZY_CUDA]).stdout.startswith("ok")


IMPORT_PROBE = """
import subprocess, sys, threading
calls = []
real = subprocess.Popen.__init__
def spy(self, *a, **k):
    calls.append(a)
    return real(self, *a, **k)
subprocess.Popen.__init__ = spy
threads = threading.active_count()
import seeder, seeder.pyt, seeder._seeding.derive
import torch
assert not torch.cuda.is_initialized(), "import initialised CUDA"
assert seeder._seeding.rngs_torch._ACCELERATORS is None, "import probed accelerators"
assert calls == [], calls
assert threading.active_count() == threads
print("ok")
"""


def test_import_does_no_heavy_work():
    from helpers import run_python

    assert run_python(["-c", IMPORT_PROBE]).stdout.strip() == "ok"


LIGHT_PROBE = """
import sys
import seeder, seeder._cli, seeder._seeding.derive
import seeder.env._launcher, seeder.env._capture, seeder.env._diff
assert "torch" not in sys.modules, "importing seeder (or what `seeder run` needs) imported torch"
seeder.init(5)  # the first use loads what it needs
assert "torch" in sys.modules and seeder.get_master_seed() == 5
print("ok")
"""


def test_import_is_light_until_used():
    from helpers import run_python

    assert run_python(["-c", LIGHT_PROBE]).stdout.strip() == "ok"


def test_dir_and_unknown_attribute():
    assert {"init", "reseed", "DistributedSampler", "digest"} <= set(dir(seeder))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = seeder.nope
