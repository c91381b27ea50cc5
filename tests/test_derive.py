"""Promise 1: derivation is a pure, versioned, collision-free function of its key."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder._seeding.derive import (
    DERIVATION_VERSION,
    MAX_KEY,
    MAX_MASTER_SEED,
    Domain,
    check_key,
    check_master_seed,
    derive_seed,
    numpy_seed,
    stream_seeds,
)

# Derivation version 1. These values are the users' experiments: they never change within a version.
GOLDEN_V1 = [
    # (master_seed, domain, task_id, epoch, rank, stream, seed)
    (0, Domain.RANK, 0, 0, 0, 0, 5886404972436038331),
    (42, Domain.RANK, 0, 0, 0, 0, 7196510507920421582),
    (42, Domain.RANK, 1, 0, 0, 0, 2548914599622904103),
    (42, Domain.RANK, 1, 1, 0, 0, 17555889878187530682),
    (42, Domain.RANK, 1, 1, 1, 0, 5423269209352878703),
    (42, Domain.SHARED, 1, 1, 0, 0, 4549717989496669941),
    (42, Domain.WORKER, 1, 1, 0, 3, 324027579099680488),
    (42, Domain.SAMPLER, 1, 7, 0, 0, 16360002318926483126),
    (42, Domain.SAMPLE, 0, 2, 0, 123456, 3662835480685714559),
    (42, Domain.DALI, 0, 0, 5, 1, 16966476927594667228),
    (42, Domain.LOADER, 1, 3, 0, 17, 2584218336508350866),
    (42, Domain.STREAM, 1, 2, 0, 5, 6605625948183838637),
    (42, Domain.ELASTIC, 1, 3, 0, 17, 1103464604572153324),
    (42, Domain.ELASTIC_RANK, 1, 3, 2, 5, 15131040815699090601),
    (
        9223372036854775807,
        Domain.RANK,
        4294967295,
        4294967295,
        4294967295,
        4294967295,
        23276081770123502,
    ),
    (123456789, Domain.RANK, 1, 10, 3, 2, 16919897145525281833),
]


def test_version_is_1():
    assert DERIVATION_VERSION == 1


@pytest.mark.parametrize("master,domain,task,epoch,rank,stream,expected", GOLDEN_V1)
def test_golden_vectors_v1(master, domain, task, epoch, rank, stream, expected):
    assert derive_seed(master, domain, task, epoch, rank, stream) == expected


@pytest.mark.parametrize("row", GOLDEN_V1[:4])
def test_derivation_is_seedsequence_with_spawn_key(row):
    master, domain, task, epoch, rank, stream, expected = row
    ss = np.random.SeedSequence(entropy=master, spawn_key=(int(domain), task, epoch, rank, stream))
    assert int(ss.generate_state(1, np.uint64)[0]) == expected


def test_domain_values_are_pinned():
    assert {d.name: int(d) for d in Domain} == {
        "RANK": 0,
        "SHARED": 1,
        "WORKER": 2,
        "SAMPLER": 3,
        "SAMPLE": 4,
        "DALI": 5,
        "LOADER": 6,
        "STREAM": 7,
        "ELASTIC": 8,
        "ELASTIC_RANK": 9,
    }


@pytest.mark.slow
def test_no_collision_over_a_million_keys():
    """10^6 distinct (domain, task, epoch, rank, stream) tuples give 10^6 distinct 64-bit seeds
    (streams vectorised)."""
    streams = np.arange(500, dtype=np.uint32)
    prefixes = list(
        itertools.product(range(len(Domain)), range(4), range(10), range(5))
    )  # 10*4*10*5 = 2000
    seeds = np.concatenate([stream_seeds(1234, *p, 1).seeds(streams)[:, 0] for p in prefixes])
    assert seeds.size >= 10**6
    assert np.unique(seeds).size == seeds.size
    for i in range(0, len(prefixes), 97):  # the vectorised path is derive_seed
        assert derive_seed(1234, *prefixes[i], 499) == int(seeds[i * 500 + 499])


def test_neighbouring_master_seeds_share_no_stream():
    """M and M+1 share no seed over 800 keys (a linear seed + offset formula shares 799 of 800)."""
    keys = list(itertools.product([Domain.RANK], range(2), range(100), range(4), [0]))
    assert len(keys) == 800
    for m in (0, 41, 2**32 - 1, 2**63 - 2):
        a = {derive_seed(m, *k) for k in keys}
        b = {derive_seed(m + 1, *k) for k in keys}
        assert len(a) == len(b) == 800
        assert not a & b
    # what a linear formula (master + a running offset per key) does
    linear = lambda m, t, e, r: m + 400 * t + 4 * e + r  # noqa: E731
    a = {linear(41, t, e, r) for _, t, e, r, _ in keys}
    b = {linear(42, t, e, r) for _, t, e, r, _ in keys}
    assert len(a & b) == 799


def test_each_key_word_matters():
    base = (42, Domain.RANK, 1, 2, 3, 4)
    seeds = {derive_seed(*base)}
    for i in range(1, 6):
        changed = list(base)
        changed[i] = int(changed[i]) + 1
        seeds.add(derive_seed(*changed))
    seeds.add(derive_seed(43, *base[1:]))
    assert len(seeds) == 7


def test_tasks_and_epochs_never_swap():
    assert derive_seed(7, Domain.RANK, 1, 2) != derive_seed(7, Domain.RANK, 2, 1)
    assert derive_seed(7, Domain.RANK, 0, 0, 1) != derive_seed(7, Domain.RANK, 0, 1, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, MAX_MASTER_SEED),
    st.sampled_from(list(Domain)),
    st.integers(0, MAX_KEY),
    st.integers(0, MAX_KEY),
    st.integers(0, MAX_KEY),
    st.integers(0, MAX_KEY),
)
def test_property_pure_and_in_range(master, domain, task, epoch, rank, stream):
    s = derive_seed(master, domain, task, epoch, rank, stream)
    assert 0 <= s < 2**64
    assert s == derive_seed(master, domain, task, epoch, rank, stream)
    assert 0 <= numpy_seed(s) < 2**32


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.booleans(),
        st.floats(allow_nan=True),
        st.text(max_size=3),
        st.none(),
        st.lists(st.integers(), max_size=2),
        st.integers(max_value=-1),
        st.integers(min_value=MAX_MASTER_SEED + 1),
    )
)
def test_property_bad_master_seeds_rejected(value):
    with pytest.raises((TypeError, ValueError)) as err:
        check_master_seed(value)
    assert "master_seed" in str(err.value)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.booleans(),
        st.floats(),
        st.text(max_size=3),
        st.none(),
        st.integers(max_value=-1),
        st.integers(min_value=MAX_KEY + 1),
    )
)
def test_property_bad_key_words_rejected(value):
    with pytest.raises((TypeError, ValueError)) as err:
        derive_seed(1, Domain.RANK, value, 0)
    assert "task_id" in str(err.value)


def test_numpy_integers_accepted_bool_rejected():
    assert derive_seed(np.int64(42), Domain.RANK, np.uint8(1)) == derive_seed(42, Domain.RANK, 1)
    with pytest.raises(TypeError):
        check_key(True, "epoch")
    with pytest.raises(TypeError):
        check_master_seed(np.bool_(True))


def test_numpy_seed_uses_both_halves():
    assert numpy_seed(5) == 5
    assert numpy_seed(5 << 32) == 5
    assert numpy_seed((5 << 32) | 5) == 0
