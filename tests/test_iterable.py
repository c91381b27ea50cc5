"""seeder.IterableDataLoader over an IterableDataset: exact mid-epoch resume, bit for bit against
the uninterrupted run.

Stops at the first, a middle and the last batch and at the epoch boundary; 0 and 2 workers,
persistent or not; a dataset without state (replayed), one with state_dict (loaded) and
``datasets`` streams (``to_iterable_dataset(num_shards=4)`` with a random ``.map``, with and
without a shuffle buffer). Every state goes through torch.save / torch.load(weights_only=True).
"""

from __future__ import annotations

import io
import logging
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import seeder
from seeder import IterableDataLoader, Seeder, SeederWarning, StateError

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from helpers import REPO_ROOT, child_env, json_lines, kill_at_step, torchrun  # noqa: E402
from stream_common import Counted, Noisy, flat, hf_stream  # noqa: E402

MASTER, BS, N = 11, 3, 23  # 2 workers: 12 + 11 items, 4 batches each, the last ones short
TRAIN = str(REPO_ROOT / "tests" / "scripts" / "stream_train.py")


def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def loader_for(make, s, workers, persistent=False, context=None):
    return IterableDataLoader(
        make(),
        batch_size=BS,
        num_workers=workers,
        seeder=s,
        persistent_workers=persistent,
        multiprocessing_context=context,
    )


def run(make, workers, stop=None, persistent=False, epochs=2, context=None):
    """Batches of ``epochs`` epochs; with ``stop=(epoch, k)`` a fresh seeder and loader continue
    after batch ``k`` (``k="end"``: after the epoch's last ``StopIteration``) from
    ``seeder.state_dict()``."""
    s = Seeder()
    s.init(MASTER)
    loader = loader_for(make, s, workers, persistent, context)
    out, saved = [], None
    for epoch in range(epochs):
        s.reseed(1, epoch)
        for k, batch in enumerate(loader, 1):
            out.append(flat(batch))
            if stop == (epoch, k):
                saved = roundtrip(s.state_dict())
                break
        if stop == (epoch, "end"):
            saved = roundtrip(s.state_dict())
        if saved is not None:
            break
    if saved is None:
        return out
    del loader
    s2 = Seeder()
    s2.init(MASTER)
    again = loader_for(make, s2, workers, persistent, context)
    s2.load_state_dict(saved)
    for epoch in range(stop[0], epochs):
        s2.reseed(1, epoch)
        out.extend(flat(b) for b in again)
    return out


@pytest.mark.parametrize("kind", [Noisy, Counted], ids=["replayed", "stateful"])
@pytest.mark.parametrize("workers", [0, 2])
def test_stream_resumes_bitwise_at_first_middle_last_batch_and_epoch_boundary(kind, workers):
    make = lambda: kind(N)  # noqa: E731
    want = run(make, workers)
    per_epoch = len(want) // 2
    assert per_epoch == 8 and want[:per_epoch] != want[per_epoch:]
    assert sorted(r[0] for b in want[:per_epoch] for r in b) == list(
        range(N)
    )  # every item once an epoch
    stops = [(0, 1), (0, per_epoch // 2 + 1), (0, per_epoch), (0, "end"), (1, 2)]
    for stop in (
        stops if workers == 0 else stops[1:4]
    ):  # the first batch with workers: in the persistent test
        assert run(make, workers, stop) == want, stop


def test_main_process_stream_leaves_the_training_loops_rngs_alone():
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    random.seed(5)
    torch.manual_seed(5)
    before = (random.random(), torch.rand(1).item())
    random.seed(5)
    torch.manual_seed(5)
    assert len(list(loader_for(lambda: Noisy(N), s, 0))) == 8
    assert (random.random(), torch.rand(1).item()) == before


def test_persistent_workers_resume_bitwise_and_follow_epochs():
    make = lambda: Counted(N)  # noqa: E731
    want = run(make, 2, persistent=True)
    assert want == run(make, 2)  # persistent workers change nothing
    for stop in [(0, 1), (1, 3)]:
        assert run(make, 2, stop=stop, persistent=True) == want, stop


@pytest.mark.slow
def test_spawned_workers_stream_what_forked_ones_do_and_resume_bitwise():
    """A worker started with ``spawn`` (a fresh interpreter: nothing inherited) produces the forked
    worker's batches."""
    make = lambda: Counted(N)  # noqa: E731
    want = run(make, 1)
    assert run(make, 1, stop=(0, 3), persistent=True, context="spawn") == want


@pytest.mark.parametrize("shuffle", [False, True], ids=["plain", "shuffle-buffer"])
@pytest.mark.parametrize("workers", [0, 2])
def test_datasets_stream_resumes_bitwise(shuffle, workers):
    pytest.importorskip("datasets")
    make = lambda: hf_stream(40, shuffle)  # noqa: E731
    want = run(make, workers)
    assert len(want) == 2 * 14 and want[:14] != want[14:]
    xs = sorted(x for b in want[:14] for x in b["x"])
    assert xs == list(range(40))
    if shuffle:
        assert [x for b in want[:14] for x in b["x"]] != list(range(40))
    for stop in [(0, 1), (0, 7)] if workers == 0 else [(0, 6)] if shuffle else [(0, 13)]:
        assert run(make, workers, stop) == want, stop


class SharedEpoch(Noisy):
    """An epoch in shared memory set by read-modify-write, as ``datasets.IterableDataset`` keeps it;
    counts the ``set_epoch`` calls made in workers, where two at once could race."""

    def __init__(self, n):
        super().__init__(n)
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self.worker_calls = torch.zeros((), dtype=torch.int64).share_memory_()

    @property
    def epoch(self):
        return int(self._epoch)

    def set_epoch(self, epoch):
        if torch.utils.data.get_worker_info() is not None:
            self.worker_calls += 1
        self._epoch += epoch - self._epoch


@pytest.mark.parametrize("persistent", [False, True])
def test_the_epoch_is_set_before_the_workers_start_and_never_raced_by_them(persistent):
    ds = SharedEpoch(N)
    s = Seeder()
    s.init(MASTER)
    loader = IterableDataLoader(
        ds, batch_size=BS, num_workers=2, seeder=s, persistent_workers=persistent
    )
    for epoch in range(3):
        s.reseed(1, epoch)
        assert len(list(loader)) == 8
        assert ds.epoch == epoch
    assert int(ds.worker_calls) == 0


def test_datasets_stream_epoch_is_set_once_not_raced_by_the_workers():
    """datasets keeps a stream's epoch in one shared-memory tensor for the main process and every
    worker, and its set_epoch reads it, then adds the difference in place. Here the two workers'
    set_epoch run in lockstep (a barrier between the read and the add): had each worker set the
    epoch, both would read 0 and add 1, and epoch 1 would run as epoch 2 (another shard order). The
    loader sets it before the workers start, so they find it set."""
    datasets = pytest.importorskip("datasets")
    import multiprocessing

    class Lockstep(datasets.IterableDataset):
        def set_epoch(self, epoch):
            if torch.utils.data.get_worker_info() is None:
                return super().set_epoch(epoch)
            delta = (
                epoch - self._epoch
            )  # datasets' own read-then-add, the two workers in step between them
            self.barrier.wait(timeout=30)
            self._epoch += delta

    def make():
        ds = hf_stream(40, shuffle=False)
        ds.__class__, ds.barrier = Lockstep, multiprocessing.get_context("fork").Barrier(2)
        return ds

    made = []
    got = run(lambda: made.append(make()) or made[-1], 2)
    assert made[0].epoch == 1
    assert got == run(lambda: hf_stream(40, shuffle=False), 2)
    assert sorted(x for b in got[14:] for x in b["x"]) == list(range(40))


def test_replay_is_counted_and_logged(caplog):
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    loader = loader_for(lambda: Noisy(N), s, 0)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["workers"] == [{"produced": 2, "state": None, "done": False}]
    again = loader_for(lambda: Noisy(N), s, 0)
    again.load_state_dict(state)
    assert again.batches_done == 2
    with caplog.at_level(logging.INFO, logger="seeder"):
        assert len(list(again)) == 6
    assert again.batches_done == 8
    assert "replayed 2/2 batches of epoch 0" in caplog.text


def test_stateful_stream_saves_the_state_as_of_the_batches_handed_out():
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    loader = IterableDataLoader(
        Counted(N), batch_size=BS, num_workers=2, prefetch_factor=4, seeder=s
    )
    it = iter(loader)
    for _ in range(3):  # worker 0 twice, worker 1 once; the workers have prefetched more
        next(it)
    state = loader.state_dict()
    assert [w["state"] for w in state["workers"]] == [{"pos": 2 * BS}, {"pos": BS}]
    assert state["next_worker"] == 1 and state["batch"] == 3


def test_other_number_of_workers_is_refused_and_changes_nothing():
    s = Seeder()
    s.init(MASTER)
    s.reseed(1, 0)
    loader = loader_for(lambda: Noisy(N), s, 2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    other = loader_for(lambda: Noisy(N), s, 0)
    before = other.state_dict()
    with pytest.raises(StateError, match="num_workers=2, this loader has 0"):
        other.load_state_dict(state)
    for bad in (
        {**state, "next_worker": 5},
        {**state, "workers": state["workers"][:1]},
        {"format": "x"},
    ):
        with pytest.raises(StateError):
            loader.load_state_dict(bad)
    assert other.state_dict() == before


def test_shares_split_the_stream_by_worker_and_refuse_shuffle():
    s = Seeder()
    s.init(MASTER)
    rows = [r for b in loader_for(lambda: Noisy(N), s, 2) for r in b.tolist()]
    assert sorted(int(r[0]) for r in rows) == list(range(N))
    assert seeder.data.stream_share() == seeder.data.StreamShare(
        0, 1, 0, 1, 0, 1, 0
    )  # outside a loader
    with pytest.raises(ValueError, match="takes no shuffle"):
        IterableDataLoader(Noisy(N), shuffle=True, seeder=s)


def test_map_below_a_threaded_shuffle_warns():
    datasets = pytest.importorskip("datasets")
    s = Seeder()
    s.init(MASTER)
    ds = datasets.Dataset.from_dict({"x": list(range(8))}).to_iterable_dataset(num_shards=4)
    with pytest.warns(SeederWarning, match="Apply .map after .shuffle"):
        IterableDataLoader(ds.map(lambda e: e).shuffle(seed=1), seeder=s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        IterableDataLoader(ds.shuffle(seed=1).map(lambda e: e), seeder=s)


# --------------------------------------------------------------------------- real processes
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
    """Killed (SIGKILL, persistent workers alive) right after the checkpoint of step 5 of 8 in epoch
    0."""
    kill_after = 5
    # the reference (forked: its start is not the subject) runs while the victim (its own Python)
    # starts
    reference = scripts.start([TRAIN, str(tmp_path / "ref.pt"), "2"], start_is_subject=False)
    try:
        ckpt = tmp_path / "run.pt"
        victim = start([str(ckpt), "2", "--pause-after", str(kill_after)], tmp_path / "victim.err")
        seen = kill_at_step(victim, kill_after, tmp_path / "victim.err")
        want, want_done = finish(reference)
    finally:
        # ended by now unless the test failed: then it is not left to the next test's runs
        reference.kill()
    assert len(want) == 16 and [r["epoch"] for r in want] == [0] * 8 + [1] * 8
    assert seen == want[:kill_after]
    resumed, done = finish(scripts.start([TRAIN, str(ckpt), "2"]))
    assert resumed == want[kill_after:]  # every later loss, bit for bit
    assert done == want_done


@pytest.mark.slow
def test_torchrun_two_ranks_streams_are_disjoint_and_resume_bitwise():
    pytest.importorskip("datasets")
    procs = torchrun(["tests/scripts/stream_ranks.py", "9"], nproc=2)
    rows = {(r["rank"], r["kind"]): r for r in json_lines(procs[0].stdout, "STREAM ")}
    assert sorted(rows) == [(0, "datasets"), (0, "plain"), (1, "datasets"), (1, "plain")]
    for (rank, kind), r in rows.items():
        assert r["got"] == r["want"], (rank, kind)
    for kind, n in (
        ("plain", 26),
        ("datasets", 32),
    ):  # epoch 0 (half the batches): the ranks' shares are disjoint
        want = [rows[rank, kind]["want"] for rank in (0, 1)]
        items = [
            int(x[0]) if kind == "plain" else x
            for w in want
            for b in w[: len(w) // 2]
            for x in (b if kind == "plain" else b["x"])
        ]
        assert sorted(items) == list(range(n)), kind
