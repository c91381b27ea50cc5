"""seeder.data.dali on real DALI CPU pipelines (device_id=None): seeds, the once-per-pipeline
warning, checkpoint resume."""

from __future__ import annotations

import copy
import io
import os
import sys
import warnings

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, json_lines, torchrun

if (
    os.environ.get("SEEDER_REQUIRE_DALI") == "1"
):  # CI sets this: a missing DALI is a failure there, not a skip
    import nvidia.dali  # noqa: F401

pytest.importorskip(
    "nvidia.dali",
    reason="NVIDIA DALI is not installed here (pip install 'seeder[dali]', i.e. "
    "nvidia-dali-cuda120); its wheels exist only for Linux x86_64/aarch64",
)

sys.path.insert(0, str(REPO_ROOT / "tests" / "scripts"))
import dali_common as dc  # noqa: E402
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy  # noqa: E402

import seeder  # noqa: E402
import seeder.data.dali as ds  # noqa: E402
import seeder.data.dali as sd  # noqa: E402
from seeder import Seeder, SeederWarning, StateError  # noqa: E402
from seeder._seeding.derive import Domain, derive_seed  # noqa: E402

# the two torchrun launches (tests/scripts/dali_ranks.py) run once, in one worker
pytestmark = pytest.mark.xdist_group("dali_ranks")

N = 8  # iterations of a full run; resumed runs split it in two


def make_seeder(master: int = 42, **kw) -> Seeder:
    s = Seeder()
    s.init(master, **kw)
    return s


def roundtrip(state):
    """Through torch.save / torch.load(weights_only=True), as a real checkpoint goes."""
    buf = io.BytesIO()
    torch.save({"seeder": state}, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)["seeder"]


def seeder_warnings(record):
    return [w for w in record if issubclass(w.category, SeederWarning)]


# ------------------------------------------------------------------ seeds
def test_pipeline_seed_is_derived_in_the_dali_domain_and_folded():
    s = make_seeder(42, rank=1, ngpus=2)
    raw = derive_seed(42, Domain.DALI, 0, 0, 1, 3)
    assert ds.pipeline_seed(3, seeder=s) == (raw ^ (raw >> 32)) & 0xFFFFFFFF
    shared_raw = derive_seed(42, Domain.DALI, 0, 0, 0, 3)
    assert (
        ds.pipeline_seed(3, shared=True, seeder=s) == (shared_raw ^ (shared_raw >> 32)) & 0xFFFFFFFF
    )
    # golden value: an upgrade must not silently change a user's DALI streams
    assert ds.pipeline_seed(0, seeder=make_seeder(42)) == 787803391


def test_pipeline_seed_per_rank_per_id_per_master():
    r0, r1 = make_seeder(42, rank=0, ngpus=2), make_seeder(42, rank=1, ngpus=2)
    assert ds.pipeline_seed(0, seeder=r0) != ds.pipeline_seed(0, seeder=r1)
    assert ds.pipeline_seed(0, shared=True, seeder=r0) == ds.pipeline_seed(
        0, shared=True, seeder=r1
    )
    assert ds.pipeline_seed(0, seeder=r0) != ds.pipeline_seed(1, seeder=r0)
    assert ds.pipeline_seed(0, seeder=r0) != ds.pipeline_seed(
        0, seeder=make_seeder(43, rank=0, ngpus=2)
    )
    seeds = [ds.pipeline_seed(i, seeder=make_seeder(m)) for m in range(20) for i in range(5)]
    assert all(0 <= x <= ds.MAX_DALI_SEED for x in seeds) and len(set(seeds)) == len(seeds)


def test_pipeline_seed_bad_input_raises():
    s = make_seeder()
    with pytest.raises(RuntimeError, match="before seeder.init"):
        ds.pipeline_seed(0, seeder=Seeder())
    with pytest.raises(ValueError, match="pipeline_id"):
        ds.pipeline_seed(-1, seeder=s)
    with pytest.raises(ValueError, match="pipeline_id"):
        ds.pipeline_seed(2**32, seeder=s)
    with pytest.raises(TypeError, match="shared"):
        ds.pipeline_seed(0, shared="yes", seeder=s)
    with pytest.raises(TypeError, match="seeder"):
        ds.pipeline_seed(0, seeder=object())


def test_dali_uses_only_low_32_bits_of_the_seed_so_seeds_are_folded():
    """Why MAX_DALI_SEED is 2**32 - 1: DALI takes an int64 but seeds 2**32 apart give the same
    streams."""

    def first(seed):
        return dc.run(dc.augment_pipeline(seed=seed), 1)

    assert dc.same(first(5), first(5 + 2**32))
    assert not dc.same(first(5), first(6))
    dc.run(dc.augment_pipeline(seed=ds.MAX_DALI_SEED), 1)  # the largest folded seed is accepted
    with pytest.raises(TypeError):
        dc.augment_pipeline(seed=2**63).build()


def test_two_master_seeds_give_different_pipelines_same_seed_same_pipeline():
    a = dc.run(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=make_seeder(1))), 3)
    b = dc.run(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=make_seeder(1))), 3)
    c = dc.run(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=make_seeder(2))), 3)
    assert dc.same(a, b)
    assert not dc.same(a, c)
    assert all(
        np.array_equal(x[1], y[1]) for x, y in zip(a, c)
    )  # same samples, different augmentation
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c))
    assert not all(np.array_equal(x[2], y[2]) for x, y in zip(a, c))


# ------------------------------------------------------------------ resume
def full_run(master=42, n=N):
    return dc.run(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=make_seeder(master))), n)


@pytest.mark.parametrize("first", [0, 1, N // 2, N - 1])
def test_n_iterations_equal_first_part_checkpoint_rebuild_rest(first):
    s1 = make_seeder()
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s1))
    sd.track(pipe, 0, seeder=s1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)  # the once-per-pipeline reseed warning
        s1.reseed(1, 0)
    got = dc.run(pipe, first)
    state = roundtrip(s1.state_dict())
    assert isinstance(state["participants"]["dali.0"]["checkpoints"][0], bytes)

    s2 = make_seeder()
    pipe2 = dc.augment_pipeline(**ds.pipeline_kwargs(0, state=state, seeder=s2))
    sd.track(pipe2, 0, seeder=s2)
    s2.load_state_dict(state)
    got += dc.run(pipe2, N - first)
    assert pipe2.is_restored_from_checkpoint
    assert dc.same(got, full_run())


def test_resume_by_stored_checkpoint_after_load_state_dict_and_replace():
    s1 = make_seeder()
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s1))
    assert sd.track(pipe, 0, seeder=s1).checkpoint is None
    got = dc.run(pipe, 3)
    state = roundtrip(s1.state_dict())

    s2 = make_seeder()
    fresh = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s2))
    tracked = sd.track(fresh, 0, seeder=s2)
    s2.load_state_dict(state)
    assert tracked.checkpoint == state["participants"]["dali.0"]["checkpoints"][0]
    rebuilt = dc.augment_pipeline(
        seed=ds.pipeline_seed(0, seeder=s2),
        enable_checkpointing=True,
        checkpoint=tracked.checkpoint,
    )
    tracked.replace(rebuilt)
    assert sd.get_tracked(0, seeder=s2).pipeline is rebuilt
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error", SeederWarning
        )  # rebuilt from the loaded checkpoint: no "not restored" warning
        got += dc.run(rebuilt, N - 3)
        s2.state_dict()
    assert dc.same(got, full_run())


def test_pipeline_not_rebuilt_from_loaded_checkpoint_warns_once():
    s1 = make_seeder()
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s1))
    sd.track(pipe, 0, seeder=s1)
    dc.run(pipe, 2)
    state = s1.state_dict()
    s2 = make_seeder()
    sd.track(
        dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s2)), 0, seeder=s2
    )  # no checkpoint=
    s2.load_state_dict(state)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s2.state_dict()
        s2.state_dict()
    msgs = [str(w.message) for w in seeder_warnings(rec)]
    assert len(msgs) == 1 and "without the checkpoint" in msgs[0] and "checkpoint=" in msgs[0]


def test_iterator_round_trip_across_epoch_boundaries():
    """DALI PyTorch iterator: epochs of 3 batches (external_source ends them); save and rebuild at
    many points."""

    def iterator(pipe):
        return DALIGenericIterator(
            pipe,
            ["image", "index", "noise"],
            auto_reset=True,
            last_batch_policy=LastBatchPolicy.PARTIAL,
        )

    def take(it, n):
        out = []
        while len(out) < n:
            for batch in it:
                out.append(tuple(batch[0][k].clone() for k in ("image", "index", "noise")))
                if len(out) == n:
                    break
        return out

    epoch = 3 * dc.BATCH
    s0 = make_seeder()
    full = take(
        iterator(dc.augment_pipeline(epoch_size=epoch, **ds.pipeline_kwargs(0, seeder=s0))), 8
    )
    idx = [int(b[1][0]) for b in full]
    assert idx == [0, 4, 8, 0, 4, 8, 0, 4]  # three epochs seen
    assert not torch.equal(full[0][0], full[3][0])  # same samples, new augmentation next epoch
    for first in (2, 3, 4):
        s1 = make_seeder()
        pipe = dc.augment_pipeline(epoch_size=epoch, **ds.pipeline_kwargs(0, seeder=s1))
        it = iterator(pipe)
        sd.track(pipe, 0, iterator=it, seeder=s1)
        got = take(it, first)
        state = roundtrip(s1.state_dict())
        s2 = make_seeder()
        pipe2 = dc.augment_pipeline(
            epoch_size=epoch, **ds.pipeline_kwargs(0, state=state, seeder=s2)
        )
        it2 = iterator(pipe2)
        sd.track(pipe2, 0, iterator=it2, seeder=s2)
        s2.load_state_dict(state)
        got += take(it2, 8 - first)
        assert all(all(torch.equal(u, v) for u, v in zip(x, y)) for x, y in zip(got, full)), (
            f"split at {first}"
        )


def test_reader_iterator_round_trip_needs_the_iterator_checkpoint(tmp_path):
    """A shuffling file reader under a DALI iterator with reader_name: the iterator's own position
    is saved too."""
    from nvidia.dali import fn, pipeline_def

    files = []
    for i in range(10):
        path = tmp_path / f"{i}.bin"
        path.write_bytes(bytes([i]) * 6)
        files.append(str(path))

    @pipeline_def(batch_size=dc.BATCH, num_threads=1, device_id=None)
    def reader_pipe():
        data, label = fn.readers.file(
            files=files, labels=list(range(10)), random_shuffle=True, initial_fill=4, name="Reader"
        )
        return data, label, fn.random.uniform(range=(0.0, 1.0))

    def iterator(pipe):
        return DALIGenericIterator(
            pipe,
            ["data", "label", "noise"],
            reader_name="Reader",
            auto_reset=True,
            last_batch_policy=LastBatchPolicy.PARTIAL,
        )

    def take(it, n):
        out = []
        while len(out) < n:
            for batch in it:
                out.append(tuple(batch[0][k].clone() for k in ("data", "label", "noise")))
                if len(out) == n:
                    break
        return out

    def same(a, b):
        return len(a) == len(b) and all(
            all(torch.equal(u, v) for u, v in zip(x, y)) for x, y in zip(a, b)
        )

    full = take(iterator(reader_pipe(**ds.pipeline_kwargs(0, seeder=make_seeder()))), 9)
    assert [len(b[1]) for b in full[:3]] == [
        4,
        4,
        2,
    ]  # epochs of 10 samples: the iterator trims the last batch
    other = take(iterator(reader_pipe(**ds.pipeline_kwargs(0, seeder=make_seeder(7)))), 9)
    assert [b[1].tolist() for b in other] != [
        b[1].tolist() for b in full
    ]  # the shuffle follows the master seed
    for first in (2, 4):
        s1 = make_seeder()
        pipe = reader_pipe(**ds.pipeline_kwargs(0, seeder=s1))
        it = iterator(pipe)
        sd.track(pipe, 0, iterator=it, seeder=s1)
        got = take(it, first)
        state = roundtrip(s1.state_dict())
        s2 = make_seeder()
        pipe2 = reader_pipe(**ds.pipeline_kwargs(0, state=state, seeder=s2))
        it2 = iterator(pipe2)
        sd.track(pipe2, 0, iterator=it2, seeder=s2)
        s2.load_state_dict(state)
        got += take(it2, 9 - first)
        assert same(got, full), f"split at {first}"


# ------------------------------------------------------------------ warnings
def test_reseed_warns_exactly_once_per_pipeline():
    s = make_seeder()
    train = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s))
    val = dc.augment_pipeline(**ds.pipeline_kwargs(1, seeder=s))
    sd.track(train, 0, seeder=s)
    s.register_generator(val)  # handed to register_generator: the id is found from its seed
    assert sd.get_tracked(1, seeder=s).pipeline is val
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for epoch in range(4):
            s.reseed(1, epoch)
            dc.run(train, 1)
    msgs = sorted(str(w.message) for w in seeder_warnings(rec))
    assert len(msgs) == 2
    assert msgs[0].startswith("DALI pipeline 0 ") and msgs[1].startswith("DALI pipeline 1 ")
    assert all("cannot be reseeded" in m and "checkpoint" in m for m in msgs)
    assert all(
        w.filename == __file__ for w in seeder_warnings(rec)
    )  # points at the user's reseed call

    # a pipeline rebuilt and swapped in warns once more; an unregistered one never again
    sd.get_tracked(0, seeder=s).replace(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s)))
    s.unregister_generator(val)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s.reseed(1, 5)
        s.reseed(1, 6)
    msgs = [str(w.message) for w in seeder_warnings(rec)]
    assert len(msgs) == 1 and msgs[0].startswith("DALI pipeline 0 ")


@pytest.mark.slow
@pytest.mark.parametrize("order", ["seeder-first", "dali-first"])
def test_a_pipeline_registers_whatever_was_imported_first(order, dali_ranks):
    """``import seeder`` loads the DALI participant factory with the core: the user never imports
    seeder.data.dali. Every rank of a launch (fresh interpreters) whose script imports seeder (and
    initialises a Seeder) before DALI, or DALI first, gives a plain pipeline to
    ``register_generator``."""
    assert [d["registers"] for d in dali_ranks[order]] == [["TrackedPipeline", 1]] * 2


def test_pipeline_without_checkpointing_warns_in_state_dict_and_saves_none():
    s = make_seeder()
    pipe = dc.augment_pipeline(seed=ds.pipeline_seed(0, seeder=s))
    sd.track(pipe, 0, seeder=s)
    dc.run(pipe, 1)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s.reseed(1, 0)
        st = s.state_dict()
        s.state_dict()
    msgs = [str(w.message) for w in seeder_warnings(rec)]
    assert len(msgs) == 2
    assert "enable_checkpointing=True" in msgs[0]  # the reseed warning says how to get exact resume
    assert "cannot save its position" in msgs[1]
    assert st["participants"]["dali.0"]["checkpoints"] is None
    assert ds.saved_checkpoints(st, 0) is None
    assert ds.pipeline_kwargs(0, state=st, seeder=s)["checkpoint"] is None
    s.load_state_dict(roundtrip(st))  # loads; nothing to restore


def test_foreign_seed_warns_at_track():
    s = make_seeder()
    with pytest.warns(SeederWarning, match=r"seed 123, so its randomness does not follow"):
        sd.track(dc.augment_pipeline(seed=123), 0, seeder=s)
    with pytest.warns(SeederWarning, match="without a seed"):
        sd.track(dc.augment_pipeline(), 1, seeder=s)


# ------------------------------------------------------------------ bad input
def test_track_bad_input_raises_and_changes_nothing():
    s = make_seeder()
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s))
    sd.track(pipe, 0, seeder=s)
    before = s.participants()
    with pytest.raises(TypeError, match="nvidia.dali.Pipeline"):
        sd.track(object(), 1, seeder=s)
    with pytest.raises(ValueError, match="already tracked"):
        sd.track(pipe, 1, seeder=s)
    with pytest.raises(ValueError, match="id 0 is already tracked"):
        sd.track(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s)), 0, seeder=s)
    with pytest.raises(TypeError, match="checkpoints"):
        sd.track(
            dc.augment_pipeline(**ds.pipeline_kwargs(1, seeder=s)), 1, iterator=object(), seeder=s
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the duplicate is refused before anything else happens
        with pytest.raises(ValueError, match="already registered"):
            s.register_generator(pipe)
    with pytest.raises(ValueError, match="pipeline_id"):
        sd.track(dc.augment_pipeline(**ds.pipeline_kwargs(1, seeder=s)), -1, seeder=s)
    assert s.participants() == before
    with pytest.raises(ValueError, match="no DALI pipeline 3"):
        sd.get_tracked(3, seeder=s)


def test_bad_state_raises_state_error_and_changes_nothing():
    s1 = make_seeder()
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s1))
    sd.track(pipe, 0, seeder=s1)
    dc.run(pipe, 2)
    good = s1.state_dict()

    s2 = make_seeder()
    other = dc.augment_pipeline(**ds.pipeline_kwargs(1, seeder=s2))
    tracked = sd.track(other, 1, seeder=s2)  # a different pipeline id at position dali.0
    rng_before = torch.get_rng_state().clone()
    with pytest.raises(StateError, match="DALI pipeline 0 where this process tracks pipeline 1"):
        s2.load_state_dict(good)
    assert tracked.restored_checkpoints is None and torch.equal(torch.get_rng_state(), rng_before)

    s3 = make_seeder()
    tracked3 = sd.track(dc.augment_pipeline(**ds.pipeline_kwargs(0, seeder=s3)), 0, seeder=s3)
    for mutate, match in [
        (lambda e: e.update(checkpoints=[]), "non-empty list"),
        (lambda e: e.update(checkpoints=[b"a", b"b"]), "2 checkpoint"),
        (lambda e: e.update(checkpoints=[42]), "non-empty list"),
        (lambda e: e.update(shared=True), "shared=True"),
        (lambda e: e.pop("seed"), "not a DALI pipeline state"),
        (lambda e: e.update(checkpointing=False), "checkpointing was off"),
    ]:
        bad = copy.deepcopy(good)
        mutate(bad["participants"]["dali.0"])
        with pytest.raises(StateError, match=match):
            s3.load_state_dict(bad)
        assert tracked3.restored_checkpoints is None
    two = copy.deepcopy(good)
    two["participants"]["dali.0"]["checkpoints"] *= (
        2  # as saved through an iterator over two pipelines
    )
    with pytest.raises(ValueError, match="iterator over 2 pipelines"):
        ds.pipeline_kwargs(0, state=two, seeder=s3)
    assert len(ds.saved_checkpoints(two, 0)) == 2
    with pytest.raises(StateError, match="no DALI pipeline 7"):
        ds.saved_checkpoints(good, 7)
    with pytest.raises(StateError, match="not a seeder state"):
        ds.saved_checkpoints({"model": {}}, 0)


def test_module_level_default_seeder(fresh_default):
    fresh_default.init(42)
    pipe = dc.augment_pipeline(**ds.pipeline_kwargs(0))
    tracked = sd.track(pipe, 0)
    assert seeder.default_seeder().participants() == [tracked]
    assert pipe.seed == ds.pipeline_seed(0) == ds.pipeline_seed(0, seeder=make_seeder(42))
    assert list(fresh_default.state_dict()["participants"]) == ["dali.0"]


# ------------------------------------------------------------------ ranks
@pytest.fixture(scope="module")
def dali_ranks():
    """Two launches of tests/scripts/dali_ranks.py on 2 ranks with master seed 42, one importing
    DALI first, one seeder first: ``{order: each rank's row}``."""
    script = str(REPO_ROOT / "tests" / "scripts" / "dali_ranks.py")
    launches = {"dali-first": [], "seeder-first": ["--seeder-first"]}
    return {
        order: sorted(
            json_lines(torchrun([script, "--seed", "42", *flag], nproc=2)[0].stdout, "DALI "),
            key=lambda d: d["rank"],
        )
        for order, flag in launches.items()
    }


@pytest.mark.slow
def test_two_ranks_under_torchrun_differ_and_shared_pipelines_agree(dali_ranks):
    first, again = dali_ranks["dali-first"], dali_ranks["seeder-first"]
    assert [d["rank"] for d in first] == [0, 1]
    r0, r1 = first
    assert r0["seed"] != r1["seed"] and r0["own"] != r1["own"]  # per-rank pipelines differ
    assert (
        r0["shared_seed"] == r1["shared_seed"] and r0["shared"] == r1["shared"]
    )  # shared ones agree
    assert (
        r0["resumed_own"] == r0["own"] and r1["resumed_own"] == r1["own"]
    )  # each rank resumes exactly
    assert first == again  # the same master seed, the same streams (whatever was imported first)
