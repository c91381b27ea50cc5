"""Sharded streams on torchrun ranks (gloo, loopback) with DataLoader workers, each rank a fresh
interpreter: stopped on 2 ranks x 2 workers, the gathered state resumed on 3 ranks x 1 worker and on
1 rank x 0 workers. Every example of the epoch once across the stop, each with the draws (the
``.map``'s augmentation after a ``datasets`` shuffle buffer included) of an uninterrupted
single-process run; a ``seeder.data.Mix`` resumed with other weights takes them at each lane's
stop, as the run given that history from the start.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest

import seeder

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from helpers import json_lines, torchrun  # noqa: E402
from shard_common import (  # noqa: E402
    MIX_LANES,
    MIX_NEW,
    MIX_OLD,
    Shards,
    flat,
    hf_sharded,
    mixed,
    rows,
)

SCRIPT = "tests/scripts/shard_ranks.py"


def reference(kind, weights=MIX_OLD):
    s = seeder.Seeder()
    s.init(5)
    shuffled = partial(hf_sharded, shuffle=True)
    make, by_shard = (Shards, None) if kind == "plain" else (shuffled, True)
    if kind == "mix":
        make, by_shard = partial(mixed, s, weights), None
    loader = seeder.IterableDataLoader(make(), batch_size=3, seeder=s, by_shard=by_shard)
    s.reseed(1, 0)
    return rows([flat(b) for b in loader])


def trained(phase, nproc, workers, where):
    out = torchrun([SCRIPT, phase, str(workers), str(where)], nproc=nproc)
    got: dict[str, list] = {"plain": [], "datasets": [], "mix": [], "weights": []}
    for r in json_lines(out[0].stdout, "SHARDS "):
        got[r["kind"]] += [tuple(x) for x in r["rows"]]
        if r["kind"] == "mix":
            got["weights"].append(r["weights"])
    return got


@pytest.mark.slow
def test_stopped_on_2x2_resumes_on_3x1_and_1x0_every_example_once_as_uninterrupted(tmp_path):
    pytest.importorskip("datasets")
    want = {kind: reference(kind) for kind in ("plain", "datasets", "mix")}
    head = trained("stop", 2, 2, tmp_path)
    for kind in want:
        assert 0 < len(head[kind]) < len(want[kind])
    stops = [sum(r[0] % MIX_LANES == lane for r in head["mix"]) for lane in range(MIX_LANES)]
    history = [[0, 0, MIX_OLD], [0, stops, MIX_NEW]]
    want["mix"] = reference("mix", [((0, 0), MIX_OLD), ((0, stops), MIX_NEW)])
    for nproc, workers in ((3, 1), (1, 0)):
        tail = trained("resume", nproc, workers, tmp_path)
        assert tail["weights"] == [history] * nproc  # each lane's stop, on every rank
        for kind in want:
            assert sorted(head[kind] + tail[kind]) == want[kind], (kind, nproc, workers)
