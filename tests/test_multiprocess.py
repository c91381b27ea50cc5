"""Promises 1-2 across real processes: torchrun on gloo, one node and two nodes on one machine.

Three launches of tests/scripts/core_ranks.py that the first two tests read: an unseeded one on one
node, an unseeded one on two nodes (a fresh draw, shared by all four ranks), and the first one's
drawn seed passed back as ``--seed`` on one node (a replay)."""

import pytest
from helpers import json_lines, torchrun

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("core_ranks")]
SCRIPT = "tests/scripts/core_ranks.py"


def rows_of(results, prefix="ROW "):
    rows = [row for r in results for row in json_lines(r.stdout, prefix)]
    return sorted(rows, key=lambda row: row["rank"])


@pytest.fixture(scope="module")
def launches():
    drawn = rows_of(torchrun([SCRIPT], nproc=2))
    return {
        "drawn": drawn,
        "two_nodes": rows_of(torchrun([SCRIPT], nproc=2, nnodes=2)),
        "replay": rows_of(torchrun([SCRIPT, "--seed", str(drawn[0]["master"])], nproc=2)),
    }


def test_drawn_master_seed_is_shared_by_all_ranks_and_replays_across_launches(launches):
    rows = launches["drawn"]
    assert [r["rank"] for r in rows] == [0, 1]
    assert rows[0]["master"] == rows[1]["master"]
    assert rows[0]["seed"] != rows[1]["seed"]
    assert rows[0]["draw"] != rows[1]["draw"]
    again = launches["two_nodes"]
    assert again[0]["master"] != rows[0]["master"], "an unseeded run draws a fresh seed"
    assert launches["replay"] == rows, (
        "a drawn seed passed back as --seed gives the same streams on every rank"
    )


def test_two_nodes_four_ranks_never_share_per_rank_seeds(launches):
    rows = launches["two_nodes"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert [r["local_rank"] for r in rows] == [0, 1, 0, 1]
    assert [r["seeder_rank"] for r in rows] == [0, 1, 2, 3]
    assert len({r["master"] for r in rows}) == 1, "one drawn master seed on both nodes"
    assert len({r["seed"] for r in rows}) == 4
    assert len({r["draw"] for r in rows}) == 4
    assert len({r["torch"] for r in rows}) == 4
    assert len({r["shared"] for r in rows}) == 1


def test_disagreeing_explicit_seeds_fail_on_every_rank():
    results = torchrun([SCRIPT, "--seed", "100", "--seed-plus-rank"], nproc=2, check=False)
    assert all(r.returncode != 0 for r in results)
    errors = [row for r in results for row in json_lines(r.stdout, "ERROR ")]
    assert sorted(e["rank"] for e in errors) == [0, 1]
    for e in errors:
        assert (
            "different master seeds" in e["error"]
            and "rank 0: 100" in e["error"]
            and "rank 1: 101" in e["error"]
        )
