"""What seeder.DataLoader, seeder.DistributedSampler, the launcher variables and the CLI refuse, and
that a refusal changes nothing.

Each refusal is a clear error naming the argument (or variable) and the fix; after it, every
global RNG, the seeder's state (master seed, last reseed, every participant's position), the
participants and the loader's and sampler's own state and ``len()`` are what they were.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.utils.data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optional import need_verify

from seeder import DataLoader, DistributedSampler, Seeder, StateError
from seeder import _cli as cli
from seeder._seeding.derive import parse_master_seed
from seeder._seeding.distributed import Topology, check_topology
from seeder.env._launcher import launch_environment
from tests.helpers import global_rng_fingerprint

# Samplers are iterated directly here, not through a loader: "loader not shown" is for loaders.
pytestmark = pytest.mark.filterwarnings("ignore:.*loader not shown:seeder.SeederWarning")


class Items(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


@pytest.fixture
def s():
    sd = Seeder()
    sd.init(1234)
    sd.reseed(1, 0)
    return sd


def _plain(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", x.dtype, tuple(x.shape), x.cpu().numpy().tobytes())
    if isinstance(x, np.ndarray):
        return ("array", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x


def everything(s, *objs):
    """Every RNG, the seeder's whole state and participants, and each object's state and len()."""
    return (
        global_rng_fingerprint(),
        _plain(s.state_dict()),
        [id(p) for p in s.participants()],
        [(_plain(o.state_dict()), len(o)) for o in objs],
    )


def batches(loader):
    return [b.tolist() for b in loader]


# --------------------------------------------------------------------------- in_order=False
def test_in_order_false_with_workers_is_refused_and_changes_nothing(s):
    before = everything(s)
    with pytest.raises(
        ValueError, match=r"in_order=False with num_workers > 0.*repeat some and skip others"
    ):
        DataLoader(Items(12), batch_size=2, shuffle=True, num_workers=2, in_order=False, seeder=s)
    assert everything(s) == before
    loader = DataLoader(
        Items(12), batch_size=2, shuffle=True, in_order=False, seeder=s
    )  # no workers: in order anyway
    assert len(batches(loader)) == 6


# --------------------------------------------------------------------------- load_state_dict in a
# worker
class LoadsInWorker(torch.utils.data.Dataset):
    """Each item tries to load a state into the worker's copy of the loader and of a sampler;
    returns what happened."""

    def __init__(self, n):
        self.n, self.loader, self.sampler, self.states = n, None, None, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        out = []
        for obj, state in ((self.loader, self.states[0]), (self.sampler, self.states[1])):
            try:
                obj.load_state_dict(state)
                out.append("loaded")
            except RuntimeError as exc:
                out.append(str(exc))
        return i, out


def test_load_state_dict_inside_a_worker_is_refused(s):
    ds = LoadsInWorker(8)
    ref = DataLoader(Items(8), batch_size=2, shuffle=True, seeder=s)
    expected = batches(ref)
    other = DataLoader(Items(8), batch_size=2, shuffle=True, seeder=s)
    it = iter(other)
    next(it), next(it)
    sampler = DistributedSampler(Items(8), seeder=s, join=False)
    ds.loader = DataLoader(
        ds,
        batch_size=2,
        shuffle=True,
        num_workers=1,
        multiprocessing_context="fork",
        seeder=s,
        collate_fn=lambda items: items,
    )
    ds.sampler, ds.states = sampler, (other.state_dict(), sampler.state_dict())
    got = [item for batch in ds.loader for item in batch]
    assert [
        [i for i, _ in got[k : k + 2]] for k in range(0, 8, 2)
    ] == expected  # the worker's loads changed nothing
    for _, outcomes in got:
        assert [o.split(" was called")[0] for o in outcomes] == [
            "seeder.DataLoader.load_state_dict()",
            "DistributedSampler.load_state_dict()",
        ]
        assert all("inside DataLoader worker 0" in o and "main process" in o for o in outcomes)
    sampler.load_state_dict(sampler.state_dict())  # the main process loads as before


# --------------------------------------------------------------------------- load under a live
# iterator
def test_a_loader_iterator_started_before_load_state_dict_stops_with_an_error(s):
    full = batches(DataLoader(Items(10), batch_size=2, shuffle=True, seeder=s))
    saved = DataLoader(Items(10), batch_size=2, shuffle=True, seeder=s)
    first = iter(saved)
    next(first)
    state = saved.state_dict()
    loader = DataLoader(Items(10), batch_size=2, shuffle=True, seeder=s)
    it = iter(loader)
    assert [next(it).tolist() for _ in range(3)] == full[:3]
    loader.load_state_dict(state)
    with pytest.raises(
        RuntimeError, match=r"started before loader.load_state_dict\(\).*iter\(loader\) again"
    ):
        next(it)
    resumed = iter(loader)
    assert len(resumed) == 4 and [b.tolist() for b in resumed] == full[1:]


def test_a_sampler_iterator_started_before_load_state_dict_stops_with_an_error(s):
    full = list(DistributedSampler(Items(10), seeder=s, join=False))
    saved = DistributedSampler(Items(10), seeder=s, join=False)
    it = iter(saved)
    next(it), next(it)
    saved.advance(2)
    sampler = DistributedSampler(Items(10), seeder=s, join=False)
    it = iter(sampler)
    assert [next(it) for _ in range(5)] == full[:5]
    sampler.load_state_dict(saved.state_dict())
    with pytest.raises(RuntimeError, match=r"started before sampler.load_state_dict\(\)"):
        next(it)
    assert list(sampler) == full[2:]


# --------------------------------------------------------------------------- shuffle and other
# flags
@pytest.mark.parametrize("bad", ["no", "False", 1, 0, 1.0, [], torch.tensor(True)])
def test_a_non_bool_shuffle_is_refused_and_changes_nothing(bad, s):
    before = everything(s)
    with pytest.raises(TypeError, match=r"shuffle must be True or False"):
        DataLoader(Items(6), shuffle=bad, seeder=s)
    with pytest.raises(TypeError, match=r"shuffle must be True or False"):
        DistributedSampler(Items(6), shuffle=bad, seeder=s)
    assert everything(s) == before


def test_bool_none_and_numpy_bool_shuffle_are_accepted(s):
    plain = batches(DataLoader(Items(6), batch_size=6, shuffle=True, seeder=s))
    assert (
        batches(DataLoader(Items(6), batch_size=6, shuffle=np.bool_(True), seeder=s))
        == plain
        != [list(range(6))]
    )
    for off in (None, False, np.bool_(False)):
        assert batches(DataLoader(Items(6), batch_size=6, shuffle=off, seeder=s)) == [
            list(range(6))
        ]
    assert (
        DistributedSampler(Items(6), shuffle=np.bool_(False), seeder=s, join=False).shuffle is False
    )


# --------------------------------------------------------------------------- ranks and world sizes
BIG = str(2**32)
OUT_OF_RANGE = [
    ("torchrun RANK", {"RANK": BIG, "WORLD_SIZE": str(2**32 + 1)}, "RANK"),
    ("torchrun WORLD_SIZE", {"RANK": "0", "WORLD_SIZE": str(2**32 + 1)}, "WORLD_SIZE"),
    ("torchrun LOCAL_RANK", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": BIG}, "LOCAL_RANK"),
    ("SLURM", {"SLURM_PROCID": BIG, "SLURM_NTASKS": str(2**33)}, "SLURM_PROCID"),
    (
        "SLURM local",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": str(2**40)},
        "SLURM_LOCALID",
    ),
    (
        "Open MPI",
        {"OMPI_COMM_WORLD_RANK": BIG, "OMPI_COMM_WORLD_SIZE": str(2**64)},
        "OMPI_COMM_WORLD_RANK",
    ),
    ("MPICH/PMI", {"PMI_RANK": "1", "PMI_SIZE": str(2**64 + 2)}, "PMI_SIZE"),
    ("MPICH local", {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": BIG}, "MPI_LOCALRANKID"),
    (
        "Lightning LOCAL_RANK",
        {"LOCAL_RANK": BIG, "WORLD_SIZE": str(2**32 + 1), "NODE_RANK": "0"},
        "LOCAL_RANK",
    ),
    ("Lightning NODE_RANK", {"LOCAL_RANK": "0", "WORLD_SIZE": "2", "NODE_RANK": BIG}, "NODE_RANK"),
    ("LOCAL_RANK alone", {"LOCAL_RANK": BIG}, "LOCAL_RANK"),
    ("sign", {"RANK": "+1", "WORLD_SIZE": "2"}, "RANK"),
    ("underscore", {"RANK": "0", "WORLD_SIZE": "1_0"}, "WORLD_SIZE"),
    ("Arabic-Indic digits", {"SLURM_PROCID": "\u0661", "SLURM_NTASKS": "2"}, "SLURM_PROCID"),
]


@pytest.mark.parametrize("name,env,variable", OUT_OF_RANGE, ids=[c[0] for c in OUT_OF_RANGE])
def test_launcher_variables_outside_the_derivation_are_refused_and_change_nothing(
    monkeypatch, s, name, env, variable
):
    before = everything(s)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(
        ValueError,
        match=rf"environment variable {variable}=.*(must be >= \d and <= |plain ASCII digits)",
    ):
        s.init(8)
    assert everything(s) == before and (s.rank, s.world_size) == (0, 1)


@pytest.mark.parametrize(
    "topology, match",
    [
        (
            Topology(2**32, 2**32 + 1, 0, "process group", "process group"),
            r"world size 4294967297 \(from process group\)",
        ),
        (
            Topology(2**32, 2**32, 0, "rank=", "ngpus="),
            r"rank 4294967296 \(from rank=\) is outside \[0, 4294967295\]",
        ),
        (
            Topology(0, 2, 2**32, "process group", "process group", "LOCAL_RANK"),
            r"local rank 4294967296 \(from LOCAL_RANK\)",
        ),
        (Topology(-1, 2, 0, "rank="), r"rank -1 \(from rank=\)"),
    ],
)
def test_every_source_of_a_topology_is_held_to_the_derivation(topology, match):
    with pytest.raises(ValueError, match=match):
        check_topology(topology)


def test_init_arguments_outside_the_derivation_are_refused_and_change_nothing(s):
    before = everything(s)
    for kw in ({"rank": 2**32}, {"ngpus": 2**33}, {"local_rank": 2**32}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            s.init(8, **kw)
        assert everything(s) == before


def test_sampler_world_larger_than_the_derivation_is_refused(s):
    before = everything(s)
    for kw in ({"num_replicas": 2**32 + 1, "rank": 2**32}, {"num_replicas": 2**64}):
        with pytest.raises(ValueError, match=r"num_replicas must be in \[1, 2\*\*32\]"):
            DistributedSampler(Items(4), seeder=s, **kw)
    assert everything(s) == before
    assert (
        DistributedSampler(
            Items(4), num_replicas=2**32, rank=2**32 - 1, seeder=s, join=False
        ).num_samples
        == 1
    )


def test_more_batches_than_the_batch_seed_word_holds_are_refused(s):
    with pytest.raises(
        ValueError, match=r"4294967297 batches per epoch on this rank, more than 2\*\*32"
    ):
        DataLoader(range(2**32 + 1), batch_size=1, seeder=s)
    assert len(DataLoader(range(2**32 + 1), batch_size=2, seeder=s)) == 2**31 + 1


# --------------------------------------------------------------------------- SEEDER_SEED
@pytest.mark.parametrize(
    "text", ["1_000", "+7", "-7", "\u0661\u0662", "\uff14\uff12", "0x10", "1e3", "4 2", "\u00b2"]
)
def test_seeder_seed_is_plain_ascii_digits_only(monkeypatch, s, text, capsys):
    with pytest.raises(
        ValueError, match="plain ASCII digits 0-9; unset it or set it to a seed such as 42"
    ):
        parse_master_seed(text)
    before = everything(s)
    monkeypatch.setenv("SEEDER_SEED", text + " ")  # a blank value is unset; this one is not
    with pytest.raises(ValueError, match="SEEDER_SEED="):
        s.init()
    assert everything(s) == before
    with pytest.raises(ValueError, match="SEEDER_SEED="):
        launch_environment(environ={"SEEDER_SEED": text + " "})
    assert cli.main(["run", "--", "true"]) == 2
    assert "plain ASCII digits" in capsys.readouterr().err


def test_seeder_seed_plain_digits_and_surrounding_whitespace_are_accepted(monkeypatch):
    assert [parse_master_seed(t) for t in ("42", " 42\n", "\t007", str(2**63 - 1))] == [
        42,
        42,
        7,
        2**63 - 1,
    ]
    monkeypatch.setenv("SEEDER_SEED", " 99\n")
    s = Seeder()
    s.init()
    assert s.get_master_seed() == 99


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--seed", "1_000", "--print-env"],
        ["run", "--seed", "+7", "--print-env"],
        ["derive", "--seed", "\u0664\u0662"],
        ["derive", "--seed", "1", "--rank", "0x1"],
    ],
)
def test_cli_integer_options_are_plain_ascii_digits_too(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    captured = capsys.readouterr()
    assert (
        info.value.code == 2
        and captured.out == ""
        and "is not an integer written in plain ASCII digits" in captured.err
    )


# --------------------------------------------------------------------------- seeder verify
# templates
@pytest.mark.parametrize(
    "pair, shown",
    [
        (
            "seed={seed.nope}",
            "{seed.nope} is not a field of this template; its placeholders are {seed}",
        ),
        ("seed=--seed={seed[0]}", "{seed[0]} is not a field"),
        (
            "resume=--resume {seed}",
            "{seed} is not a field of this template; its placeholders are {ckpt_dir}",
        ),
        ("stop_after_steps=--stop {steps:s}", "is not a valid template (Unknown format code 's'"),
        ("epochs=--epochs {", "is not a valid template"),
        ("seed=--seed '{seed}", "is not a valid template (No closing quotation)"),
    ],
)
def test_verify_template_errors_name_the_template_and_its_fields(capsys, tmp_path, pair, shown):
    need_verify(figures=False)
    assert cli.main(["verify", "--out", str(tmp_path / "out"), "--arg", pair, "--", "true"]) == 2
    err = capsys.readouterr().err
    name, _, template = pair.partition("=")
    assert f"--arg {name}={template!r}" in err and shown in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- len() of what is left
def test_a_resumed_sampler_lists_what_is_left_at_huge_n(s):
    n = 2**40
    saved = DistributedSampler(range(n), num_replicas=4, rank=1, seeder=s, join=False)
    state = saved.state_dict()
    state["position"] = saved.num_samples - 3
    sampler = DistributedSampler(range(n), num_replicas=4, rank=1, seeder=s, join=False)
    sampler.load_state_dict(state)
    assert len(sampler) == 3
    rest = list(sampler)  # list() sizes itself from len(): the whole shard would be a MemoryError
    assert len(rest) == 3 and len(sampler) == saved.num_samples == n // 4
    assert [int(i) for b in saved.blocks(0, saved.num_samples - 3) for i in b] == rest


def test_a_resumed_epoch_is_the_length_of_what_is_left(s):
    full = list(DistributedSampler(Items(10), seeder=s, join=False))
    saved = DistributedSampler(Items(10), seeder=s, join=False)
    it = iter(saved)
    [next(it) for _ in range(4)]
    saved.advance(4)
    sampler = DistributedSampler(Items(10), seeder=s, join=False)
    sampler.load_state_dict(saved.state_dict())
    torch_loader = torch.utils.data.DataLoader(Items(10), batch_size=4, sampler=sampler)
    assert len(sampler) == 6 and len(torch_loader) == 2
    assert [x for b in torch_loader for x in b.tolist()] == full[4:]
    assert (
        len(sampler) == 10 and len(torch_loader) == 3
    )  # the resumed epoch is over: a whole one again


def test_dataset_lengths_python_cannot_hold_are_a_clear_error(s):
    class Huge(torch.utils.data.Dataset):
        def __len__(self):
            return 2**64

        def __getitem__(self, i):
            return i

    before = everything(s)
    for make in (
        lambda: DistributedSampler(Huge(), seeder=s),
        lambda: DataLoader(Huge(), seeder=s),
    ):
        with pytest.raises(
            ValueError, match=r"__len__ returned more than Python's len\(\) can hold"
        ):
            make()
    assert everything(s) == before
    largest = DistributedSampler(
        range(2**63 - 1), seeder=s, join=False
    )  # the largest length Python's len() allows
    assert len(largest) == 2**63 - 1


# --------------------------------------------------------------------------- property: bad
# arguments change nothing
BAD_LOADER_ARGS = {
    "batch_size": [0, -1, 1.5, True, "4"],
    "shuffle": ["no", 1, 0.0],
    "num_workers": [-1, 1.5, "2", True],
    "drop_last": ["yes", 1, None],
    "pin_memory": ["yes", 1],
    "timeout": [-1, "x", float("nan"), True],
    "generator": ["g", 3],
    "collate_fn": [3],
    "worker_init_fn": ["f"],
    "in_order": ["no", 0],
    "prefetch_factor": [0, -1, 2.5],
    "persistent_workers": ["yes", 1],
    "sampler": [object(), torch.utils.data.SequentialSampler(range(6))],
    "seeder": [object()],
}
BAD_SAMPLER_ARGS = {
    "num_replicas": [0, -1, 2.0, "2", True, 2**32 + 1],
    "rank": [-1, 6, 1.0, "0", True],
    "shuffle": ["no", 1],
    "seed": [-1, 2**63, 1.5, "7"],
    "drop_last": [1, None],
    "mode": ["fast", 3],
    "task": [-1, 2**32, 1.0],
    "stream": [-1, 2**32, "0"],
    "with_epoch": ["yes", 1],
    "seeder": [object()],
}
BAD_STATE_VALUES = {
    "epoch": [-1, 2**32, 1.0, "0", None, True],
    "position": [-1, 11, 2.0, None, True],
    "batch": [-1, 99, 1.0, None],
    "key": [-1, 2**64, 1.5, None],
    "num_replicas": [2, 0],
    "dataset_len": [11, 9],
    "format": ["seeder.other", None],
    "version": [0, 99, "1"],
}
# State keys of the loader (the rest are the nested sampler state's).
LOADER_KEYS = {"batch", "format", "version"}
OUTCOMES: dict = {}  # (target, error class) -> count, for the note


def _case():
    loader_args = st.sampled_from(sorted(BAD_LOADER_ARGS)).flatmap(
        lambda k: st.tuples(st.just("DataLoader"), st.just(k), st.sampled_from(BAD_LOADER_ARGS[k]))
    )
    sampler_args = st.sampled_from(sorted(BAD_SAMPLER_ARGS)).flatmap(
        lambda k: st.tuples(
            st.just("DistributedSampler"), st.just(k), st.sampled_from(BAD_SAMPLER_ARGS[k])
        )
    )
    states = st.tuples(
        st.sampled_from(["DataLoader.load_state_dict", "DistributedSampler.load_state_dict"]),
        st.sampled_from(sorted(BAD_STATE_VALUES)),
    ).flatmap(
        lambda tk: st.tuples(
            st.just(tk[0]), st.just(tk[1]), st.sampled_from(BAD_STATE_VALUES[tk[1]])
        )
    )
    return st.one_of(loader_args, sampler_args, states)


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=_case())
def test_bad_arguments_and_states_raise_a_named_error_and_change_nothing(case):
    target, name, bad = case
    s = Seeder()
    s.init(5)
    s.reseed(1, 0)
    loader = DataLoader(Items(10), batch_size=2, shuffle=True, seeder=s)
    sampler = DistributedSampler(Items(10), seeder=s)
    it, sit = iter(loader), iter(sampler)
    next(it), next(sit)
    sampler.advance(1)
    before = everything(s, loader, sampler)
    if target == "DataLoader":
        call = lambda: DataLoader(Items(6), **{"seeder": s, name: bad})  # noqa: E731
    elif target == "DistributedSampler":
        call = lambda: DistributedSampler(Items(6), **{"seeder": s, name: bad})  # noqa: E731
    else:
        obj = loader if target.startswith("DataLoader") else sampler
        state = obj.state_dict()
        inner = state if name in LOADER_KEYS or obj is sampler else state["sampler"]
        if name == "batch" and obj is sampler:
            name, inner = "position", state
        inner[name] = bad
        call = lambda: obj.load_state_dict(state)  # noqa: E731
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    message = str(info.value)
    named = {
        "version": "version",
        "format": "state",
        "dataset_len": "length",
        "num_replicas": "num_replicas",
        "sampler": "sampler",
        "seeder": "Seeder",
    }.get(name, name)
    assert named in message, (case, message)
    if target.endswith("load_state_dict"):
        assert isinstance(info.value, StateError), (case, message)
    assert everything(s, loader, sampler) == before, case
    key = (target, type(info.value).__name__)
    OUTCOMES[key] = OUTCOMES.get(key, 0) + 1


class SeederLoadsInWorker(torch.utils.data.Dataset):
    """Each item calls Seeder.load_state_dict in the worker (a plain torch DataLoader: no seeder
    loader joined)."""

    def __init__(self, seeder, state):
        self.seeder, self.state = seeder, state

    def __len__(self):
        return 2

    def __getitem__(self, i):
        try:
            self.seeder.load_state_dict(self.state)
            return "loaded"
        except RuntimeError as exc:
            return str(exc)


def test_seeder_load_state_dict_inside_a_plain_torch_worker_is_refused():
    s = Seeder()
    s.init(5)
    s.reseed(1, 0)
    state = s.state_dict()
    loader = torch.utils.data.DataLoader(
        SeederLoadsInWorker(s, state),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="fork",
    )
    got = list(loader)
    assert all(
        "seeder.load_state_dict() was called inside DataLoader worker 0" in g for g in got
    ), got
    s.load_state_dict(state)  # the main process loads as before
