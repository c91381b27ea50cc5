"""Ranks where no launcher sets RANK: SLURM, Open MPI and MPICH/Intel MPI variables, their order,
their traps.

The order itself is checked in-process (``discover`` reads ``os.environ``); launches are real
processes with those variables (forked from the session's server: ``seeder.init`` reads them, the
process start is not the subject) and no process group.
"""

import logging

import pytest
from helpers import REPO_ROOT, json_lines, torchrun

from seeder import Seeder
from seeder._seeding.distributed import LAUNCHER_VARIABLES, Topology, discover

SCRIPT = str(REPO_ROOT / "tests" / "scripts" / "ranks_env.py")
SLURM_4 = {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"}


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch):
    for var in LAUNCHER_VARIABLES:
        monkeypatch.delenv(var, raising=False)


def _set(monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)


def _where(t: Topology):
    return (t.rank, t.world_size, t.local_rank, t.rank_from, t.world_from, t.local_from)


ORDER = [
    ("slurm", SLURM_4, {}, (2, 4, 0, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")),
    (
        "open mpi",
        {
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "3",
        },
        {},
        (3, 8, 3, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ),
    (
        "mpich",
        {"PMI_RANK": "5", "PMI_SIZE": "6", "MPI_LOCALRANKID": "1"},
        {},
        (5, 6, 1, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ),
    (
        "pmi without a local rank",
        {"PMI_RANK": "1", "PMI_SIZE": "2"},
        {},
        (1, 2, 1, "PMI_RANK", "PMI_SIZE", "rank"),
    ),
    (
        "torchrun inside an salloc/sbatch shell",
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "1",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1",
            "SLURM_LOCALID": "0",
        },
        {},
        (1, 2, 1, "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ),
    (
        "mpirun inside an sbatch script",
        {
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            **SLURM_4,
        },
        {},
        (3, 4, 1, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ),
    (
        "ngpus agrees with SLURM",
        SLURM_4,
        {"world_size": 4},
        (2, 4, 0, "SLURM_PROCID", "ngpus=", "SLURM_LOCALID"),
    ),
    (
        "explicit rank and ngpus: no launcher is read",
        SLURM_4,
        {"rank": 1, "world_size": 2},
        (1, 2, 1, "rank=", "ngpus=", "rank"),
    ),
    (
        "explicit rank, SLURM's world",
        SLURM_4,
        {"rank": 3},
        (3, 4, 0, "rank=", "SLURM_NTASKS", "SLURM_LOCALID"),
    ),
    (
        "srun -n1 spawning 4 processes",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"},
        {"world_size": 4, "local_rank": 2},
        (2, 4, 2, "local_rank=", "ngpus=", "local_rank="),
    ),
    (
        "salloc shell: SLURM_NTASKS alone is no launch",
        {"SLURM_NTASKS": "4"},
        {},
        (0, 1, 0, "default", "default", "rank"),
    ),
    (
        "batch step: SLURM_PROCID alone is no launch",
        {"SLURM_PROCID": "0"},
        {"world_size": 2, "local_rank": 1},
        (1, 2, 1, "local_rank=", "ngpus=", "local_rank="),
    ),
]


@pytest.mark.parametrize("name,env,kwargs,expected", ORDER, ids=[c[0] for c in ORDER])
def test_documented_order(monkeypatch, name, env, kwargs, expected):
    _set(monkeypatch, env)
    args = {"rank": None, "world_size": None, "local_rank": None, **kwargs}
    assert _where(discover(**args)) == expected


BAD = [
    (
        "ngpus against SLURM's world",
        SLURM_4,
        {"ngpus": 2},
        "ngpus=2 contradicts SLURM_NTASKS=4.*pass ngpus=4",
    ),
    (
        "mp.spawn inside an sbatch --ntasks=4 script",
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0"},
        {"ngpus": 4, "local_rank": 1},
        "local_rank=1 contradicts SLURM_LOCALID=0.*global rank=",
    ),
    (
        "rank not below the world",
        {"SLURM_PROCID": "4", "SLURM_NTASKS": "4"},
        {},
        "SLURM_PROCID=4 is not below SLURM_NTASKS=4",
    ),
    (
        "local rank not below the world",
        {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "5",
        },
        {},
        "OMPI_COMM_WORLD_LOCAL_RANK=5 is not below OMPI_COMM_WORLD_SIZE=4",
    ),
    (
        "not an integer",
        {"SLURM_PROCID": "zero", "SLURM_NTASKS": "4"},
        {},
        "SLURM_PROCID='zero' is not an integer",
    ),
    (
        "negative",
        {"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "4"},
        {},
        "OMPI_COMM_WORLD_RANK='-1' must be >= 0",
    ),
    ("empty world", {"PMI_RANK": "0", "PMI_SIZE": "0"}, {}, "PMI_SIZE='0' must be >= 1"),
    (
        "half an MPI launch",
        {"OMPI_COMM_WORLD_RANK": "1"},
        {},
        "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not",
    ),
    (
        "explicit rank outside SLURM's world",
        SLURM_4,
        {"rank": 5},
        r"rank 5 \(from rank=\) is outside the world of 4 process\(es\) \(from SLURM_NTASKS\)",
    ),
]


@pytest.mark.parametrize("name,env,kwargs,match", BAD, ids=[c[0] for c in BAD])
def test_bad_launch_is_a_clear_error_that_changes_nothing(monkeypatch, name, env, kwargs, match):
    s = Seeder()
    s.init(7)
    _set(monkeypatch, env)
    with pytest.raises(ValueError, match=match):
        s.init(8, **kwargs)
    assert (s.get_master_seed(), s.rank, s.world_size, s.local_rank) == (7, 0, 1, 0)


def test_a_drawn_seed_needs_a_process_group_when_there_are_many_ranks(monkeypatch):
    s = Seeder()
    s.init(7)
    _set(monkeypatch, SLURM_4)
    with pytest.raises(
        RuntimeError, match=r"SLURM_NTASKS.*master_seed=.*SEEDER_SEED.*init_process_group"
    ):
        s.init()
    assert (s.get_master_seed(), s.world_size) == (7, 1)
    monkeypatch.setenv("SEEDER_SEED", "31")
    s.init()
    assert (s.get_master_seed(), s.rank, s.world_size) == (31, 2, 4)
    monkeypatch.delenv("SEEDER_SEED")
    with pytest.raises(RuntimeError, match="each process would draw its own seed"):
        s.init(ngpus=4, rank=2)
    for var in LAUNCHER_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    s.init()  # one process: a drawn seed needs no agreement
    assert s.world_size == 1


def test_topology_is_logged_once_with_its_sources(monkeypatch, caplog):
    Seeder().init(1)  # a different topology first, so the next one is new whatever ran before
    _set(monkeypatch, SLURM_4)
    with caplog.at_level(logging.INFO, logger="seeder"):
        Seeder().init(1)
        Seeder().init(1)
    lines = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("seeder topology:")
    ]
    assert lines == [
        "seeder topology: rank 2 (SLURM_PROCID) of 4 (SLURM_NTASKS), local rank 0 (SLURM_LOCALID)"
    ]


# ------------------------------------------------------------------ real processes, several at once


def launch(scripts, envs, args=()):
    """Run one ``ranks_env.py`` per environment, one after the other (they share no process group),
    each forked from the session's ``scripts`` server: a real process with those variables, whose
    start is not the subject (the variables are read by ``seeder.init``). ``(returncode, ROW or
    ERROR, stderr)`` each."""
    results = []
    for extra in envs:
        p = scripts.run([SCRIPT, *args], env=extra, check=False, start_is_subject=False)
        rows = json_lines(p.stdout, "ROW ") or json_lines(p.stdout, "ERROR ")
        assert len(rows) == 1, (
            f"exit {p.returncode}\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}"
        )
        results.append((p.returncode, rows[0], p.stderr))
    return results


def _check_ranks(results, master, locals_):
    assert all(rc == 0 for rc, _, _ in results), results
    rows = [row for _, row, _ in results]
    assert [r["rank"] for r in rows] == list(range(len(rows)))
    assert [r["local"] for r in rows] == locals_
    assert {r["world"] for r in rows} == {len(rows)}
    assert {r["master"] for r in rows} == {master}
    assert len({r["shared"] for r in rows}) == 1
    for key in ("seed", "draw", "torch"):
        assert len({r[key] for r in rows}) == len(rows), key
    for r in rows:  # the seeds are those of the global rank, exactly
        ref = Seeder()
        ref.init(master, ngpus=len(rows), rank=r["rank"])
        assert r["seed"] == ref.get_seed(1, 0)
    return rows


@pytest.mark.slow
def test_two_slurm_nodes_whose_local_ranks_collide(scripts):
    envs = [
        {
            "SLURM_PROCID": str(r),
            "SLURM_LOCALID": str(r % 2),
            "SLURM_NODEID": str(r // 2),
            "SLURM_NTASKS": "4",
        }
        for r in range(4)
    ]
    results = launch(scripts, envs, ["--seed", "1234", "--init-twice"])
    _check_ranks(results, 1234, [0, 1, 0, 1])
    for r, (_, _, err) in enumerate(results):
        line = (
            f"seeder topology: rank {r} (SLURM_PROCID) of 4 (SLURM_NTASKS), local rank {r % 2} "
            f"(SLURM_LOCALID)"
        )
        assert err.count("seeder topology:") == 1 and line in err, err


@pytest.mark.slow
def test_mpirun_inside_an_sbatch_script_with_a_replayed_seed(scripts):
    envs = [
        {
            "OMPI_COMM_WORLD_RANK": str(r),
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": str(r % 2),
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "0",
            "SEEDER_SEED": "99",
        }
        for r in range(4)
    ]
    rows = _check_ranks(launch(scripts, envs), 99, [0, 1, 0, 1])
    assert rows[1]["draw"] != rows[3]["draw"]


@pytest.mark.slow
def test_mpich_ranks_refuse_to_draw_separate_seeds(scripts):
    results = launch(scripts, [{"PMI_RANK": str(r), "PMI_SIZE": "2"} for r in range(2)])
    for rc, row, _ in results:
        assert rc == 3 and row["type"] == "RuntimeError" and not row["initialized"]
        assert "PMI_SIZE" in row["error"] and "SEEDER_SEED" in row["error"]


@pytest.mark.slow
def test_torchrun_inside_a_slurm_allocation_wins():
    results = torchrun(
        [SCRIPT, "--seed", "5"],
        nproc=2,
        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"},
    )
    rows = sorted(json_lines(results[0].stdout, "ROW "), key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["local"]) for r in rows] == [(0, 2, 0), (1, 2, 1)]
    assert "rank 1 (RANK) of 2 (WORLD_SIZE), local rank 1 (LOCAL_RANK)" in results[0].stderr


def test_lightning_ddp_launcher_without_rank(monkeypatch):
    """Lightning's subprocess launcher sets WORLD_SIZE, NODE_RANK and LOCAL_RANK but no RANK."""
    from seeder._seeding.distributed import discover

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("NODE_RANK", "0")
    topo = discover(None, None, None)
    assert (topo.rank, topo.world_size, topo.local_rank) == (1, 2, 1)
    monkeypatch.setenv("NODE_RANK", "1")  # another node: its global rank cannot be known from these
    with pytest.raises(ValueError, match="pass the global rank"):
        discover(None, None, None)
