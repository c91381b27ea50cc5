"""seeder.DataLoader across real process boundaries: a SIGKILL mid-epoch, then resume; torchrun with
2 ranks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import REPO_ROOT, child_env, json_lines, kill_at_step, torchrun

TRAIN = str(REPO_ROOT / "tests" / "scripts" / "loader_train.py")


def start(args, err_path):
    return subprocess.Popen(
        [sys.executable, TRAIN, *args],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(err_path, "w"),
        text=True,
        cwd=str(REPO_ROOT),
        start_new_session=True,
    )  # its own process group: the kill reaches its workers too


def finish(run):
    """The STEP and DONE rows of a run of the session's ``scripts`` runner."""
    assert run.wait(300) == 0, (
        f"{TRAIN} exited {run.returncode}\n{run.stdout()[-3000:]}\n{run.err.read_text()[-4000:]}"
    )
    return json_lines(run.stdout(), "STEP"), json_lines(run.stdout(), "DONE")


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_is_bitwise(tmp_path, scripts):
    """Killed for real (SIGKILL, workers alive) right after the checkpoint of step 4 of 6 in epoch
    0."""
    kill_after = 4
    # never killed nor resumed: forked from the session's server, while the victim (its own
    # Python) starts
    reference = scripts.start([TRAIN, str(tmp_path / "ref.pt"), "2"], start_is_subject=False)
    try:
        ckpt = tmp_path / "run.pt"
        victim = start([str(ckpt), "2", "--pause-after", str(kill_after)], tmp_path / "victim.err")
        seen = kill_at_step(victim, kill_after, tmp_path / "victim.err")
        want, want_done = finish(reference)
    finally:
        # ended by now unless the test failed: then it is not left to the next test's runs
        reference.kill()
    assert len(want) == 12 and [r["epoch"] for r in want][:6] == [0] * 6
    assert seen == want[:kill_after]

    resumed, done = finish(scripts.start([TRAIN, str(ckpt), "2"]))
    assert resumed == want[kill_after:]  # every later loss, bit for bit (float.hex)
    assert done == want_done  # and the final weights


@pytest.mark.slow
def test_torchrun_two_ranks_disjoint_shards_and_exact_mid_epoch_resume():
    n = 22  # even: no padding, so the shards are disjoint and cover range(n)
    procs = torchrun(["tests/scripts/loader_ranks.py", "9", str(n)], nproc=2)
    rows = json_lines(procs[0].stdout, "LOADER ")
    assert sorted((r["rank"], r["epoch"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    by = {(r["rank"], r["epoch"]): r for r in rows}
    for epoch in (0, 1):
        shards = [[int(row[0]) for b in by[rank, epoch]["batches"] for row in b] for rank in (0, 1)]
        assert len(shards[0]) == len(shards[1]) == n // 2
        assert not set(shards[0]) & set(shards[1])
        assert sorted(shards[0] + shards[1]) == list(range(n))
        for rank in (0, 1):
            r = by[rank, epoch]
            assert r["world"] == 2
            assert r["resumed"] == r["batches"][2:], (
                rank,
                epoch,
            )  # indices and every random draw, exact
    assert by[0, 0]["batches"] != by[0, 1]["batches"]
    noise = [[row[1:] for b in by[rank, 0]["batches"] for row in b] for rank in (0, 1)]
    assert noise[0] != noise[1]  # each rank's batches have their own seeds
