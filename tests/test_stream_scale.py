"""Sharded streams at a scale past this machine, by simulation (no processes, nothing materialised).

Up to 1,024 ranks x 8 workers read 12,000 shards of a 1e9-example epoch: each worker's reading is
counted arithmetically (its shards one after the other, ``batch_size`` examples a batch, the rank's
round robin over its workers, an exhausted worker skipped), stopped, and its state written as
``seeder.IterableDataLoader`` writes it; the ranks' states are joined by seeder's own
``merge_ranks`` and checked and dealt again by the loader's own functions on the next topology.
Across three topologies and two stops, every example of every shard is read exactly once. A mix of
streams over 4,096 lanes and 1e9 positions counts each source's items arithmetically.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seeder
from seeder._state.streams import SHARD_FORMAT, merge_ranks
from seeder.data import Mix
from seeder.data._mix_weights import BLOCK
from seeder.data._shard_state import fresh_progress
from seeder.data._shards import check_positions, deal, redeal

EXAMPLES, SHARDS = 10**9, 12_000


def shard_lengths(rng, shards, total):
    """Uneven lengths (half to one and a half of the mean) that add up to ``total``."""
    w = rng.random(shards) + 0.5
    lengths = np.floor(w / w.sum() * total).astype(np.int64)
    lengths[0] += total - lengths.sum()
    return lengths


def handed(totals, k):
    """Batches each worker handed out after ``k`` of the rank's round robin (exhausted skipped)."""
    totals = np.asarray(totals, dtype=np.int64)
    if k >= totals.sum():
        return totals.copy()
    lo, hi = 0, int(totals.max())
    while lo < hi:  # the most full rounds that fit in k
        c = (lo + hi + 1) // 2
        lo, hi = (c, hi) if np.minimum(totals, c).sum() <= k else (lo, c - 1)
    n = np.minimum(totals, lo)
    rest = k - int(n.sum())
    for w in np.flatnonzero(totals > lo)[:rest]:
        n[w] += 1
    return n


def run_phase(lengths, assignment_of, world, workers, batch, stop, rank_stops=None, ended=()):
    """Every rank of a topology reads from its assignment; returns each rank's state at the stop
    (``stop`` batches per rank, ``None``: to the end) and the examples read, per shard."""
    read = np.zeros(len(lengths), dtype=np.int64)
    states = []
    for rank in range(world):
        assignment = assignment_of(rank)
        totals, rows = [], []
        for shards in assignment:
            s = np.array([p[0] for p in shards], dtype=np.int64)
            start = np.array([p[1] for p in shards], dtype=np.int64)
            left = lengths[s] - start if len(s) else np.zeros(0, np.int64)
            rows.append((s, start, left))
            totals.append(-(-int(left.sum()) // batch))
        k = rank_stops[rank] if rank_stops is not None else stop
        n = handed(totals, sum(totals) if k is None else k)
        progress = fresh_progress(0, assignment, list(ended))
        for w, ((s, start, left), produced) in enumerate(zip(rows, n)):
            taken = min(int(produced) * batch, int(left.sum()))
            ends = np.cumsum(left)
            cursor = int(np.searchsorted(ends, taken, side="right"))
            before = int(ends[cursor - 1]) if cursor else 0
            pos = int(start[cursor]) + taken - before if cursor < len(s) else 0
            read[s[:cursor]] += left[:cursor]
            if cursor < len(s):
                read[s[cursor]] += taken - before
            progress["workers"][w] = {
                "produced": int(produced),
                "state": {"cursor": cursor, "pos": pos},
                "done": k is None,
            }
        progress["batch"] = int(n.sum())
        states.append(
            {
                "format": SHARD_FORMAT,
                "version": 1,
                **progress,
                "num_workers": workers,
                "batch_size": batch,
                "drop_last": False,
                "world_size": world,
                "rank": rank,
                "num_shards": len(lengths),
            }
        )
    return states, read


def fresh(world, workers, shards=SHARDS):
    dealt = deal(range(shards), world * workers)
    return lambda rank: [[[s, 0] for s in dealt[rank * workers + w]] for w in range(workers)]


def moved(states, world, workers, count):
    """The next topology's assignment (by rank) and the shards ended, from every rank's state."""
    merged = merge_ranks(states)
    positions = check_positions(merged["positions"], merged["ended"], count, "simulation")
    dealt = deal(sorted(positions), world * workers)
    for rank in (0, world - 1):  # the loader's own re-deal, for two ranks (each is O(shards))
        assert redeal(positions, rank, world, workers) == [
            [[s, positions[s]] for s in dealt[rank * workers + w]] for w in range(workers)
        ]
    return (
        lambda rank: [
            [[s, positions[s]] for s in dealt[rank * workers + w]] for w in range(workers)
        ]
    ), merged["ended"]


def test_a_billion_examples_over_1024x8_then_48x2_then_1x0_each_read_once():
    lengths = shard_lengths(np.random.default_rng(0), SHARDS, EXAMPLES)
    assert lengths.sum() == EXAMPLES and lengths.min() > 0
    states, read = run_phase(lengths, fresh(1024, 8), 1024, 8, 512, stop=90)
    assert 0 < read.sum() < EXAMPLES
    assign, ended = moved(states, 48, 2, SHARDS)
    states2, read2 = run_phase(lengths, assign, 48, 2, 4096, stop=700, ended=ended)
    assign, ended = moved(states2, 1, 1, SHARDS)
    states3, read3 = run_phase(lengths, assign, 1, 1, 1 << 20, stop=None, ended=ended)
    assert np.array_equal(read + read2 + read3, lengths)  # every example once
    assert merge_ranks(states3)["positions"] == [] or all(
        p == lengths[s] for s, p in merge_ranks(states3)["positions"]
    )


@settings(max_examples=25, deadline=None)
@given(
    shards=st.integers(1, 40),
    topologies=st.lists(
        st.tuples(st.integers(1, 16), st.integers(1, 8), st.integers(1, 64), st.integers(0, 30)),
        min_size=2,
        max_size=4,
    ),
    seed=st.integers(0, 2**16),
)
def test_random_topologies_and_stops_read_every_example_once(shards, topologies, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 200, size=shards).astype(np.int64)
    total = np.zeros(shards, dtype=np.int64)
    assign, ended = fresh(topologies[0][0], topologies[0][1], shards), []
    for i, (world, workers, batch, stop) in enumerate(topologies):
        last = i == len(topologies) - 1
        stops = None if last else [int(x) for x in rng.integers(0, stop + 1, size=world)]
        states, read = run_phase(
            lengths, assign, world, workers, batch, None if last else stop, stops, ended
        )
        total += read
        if not last:
            nxt = topologies[i + 1]
            assign, ended = moved(states, nxt[0], nxt[1], shards)
    assert np.array_equal(total, lengths)


@pytest.mark.parametrize("world", [1, 7, 1024])
def test_a_deal_gives_every_shard_to_one_process(world):
    dealt = deal(range(SHARDS), world * 8)
    flat = sorted(s for part in dealt for s in part)
    assert flat == list(range(SHARDS))
    sizes = {len(part) for part in dealt}
    assert max(sizes) - min(sizes) <= 1  # uneven shares differ by one shard at most


class Declared(torch.utils.data.IterableDataset):
    """A stream that declares its shards and is never read here: the mix's counts are arithmetic."""

    def __init__(self, shards):
        self.num_shards = shards

    def iter_shard(self, shard, start):
        raise AssertionError("not read: the mix's counts are computed, not drawn")

    def __iter__(self):
        raise AssertionError("not read")


def test_a_mix_of_1e9_positions_in_4096_lanes_counts_each_source_at_once():
    s = seeder.Seeder()
    s.init(11)
    s.reseed(1, 0)
    weights = {"web": 0.6, "code": 0.3, "math": 0.1}
    mix = Mix(
        {name: Declared(4096) for name in weights}, weights=weights, length=EXAMPLES, seeder=s
    )
    assert mix.lanes == 4096
    for lane in range(0, 4096, 97):
        n = mix.lane_length(lane)
        counts = mix._counts_at(n, lane)
        assert counts.sum() == n  # every position of the lane from exactly one source
        for got, share in zip(counts, mix.quotas[0] / BLOCK):
            assert abs(got - n * share) <= BLOCK  # the block quotas, to within one block
    assert sum(mix.lane_length(lane) for lane in range(4096)) == EXAMPLES
