"""Sharded streams on torchrun ranks (gloo, loopback) with DataLoader workers, each rank a fresh
interpreter: stopped on 2 ranks x 2 workers, the gathered state resumed on 3 ranks x 1 worker and on
1 rank x 0 workers. Every example of the epoch once across the stop, each with the draws (the
``.map``'s augmentation after a ``datasets`` shuffle buffer included) of an uninterrupted
single-process run.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest

import seeder

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from helpers import json_lines, torchrun  # noqa: E402
from shard_common import Shards, flat, hf_sharded, rows  # noqa: E402

SCRIPT = "tests/scripts/shard_ranks.py"


def reference(kind):
    s = seeder.Seeder()
    s.init(5)
    shuffled = partial(hf_sharded, shuffle=True)
    make, by_shard = (Shards, None) if kind == "plain" else (shuffled, True)
    loader = seeder.IterableDataLoader(make(), batch_size=3, seeder=s, by_shard=by_shard)
    s.reseed(1, 0)
    return rows([flat(b) for b in loader])


def trained(phase, nproc, workers, where):
    out = torchrun([SCRIPT, phase, str(workers), str(where)], nproc=nproc)
    got: dict[str, list] = {"plain": [], "datasets": []}
    for r in json_lines(out[0].stdout, "SHARDS "):
        got[r["kind"]] += [tuple(x) for x in r["rows"]]
    return got


@pytest.mark.slow
def test_stopped_on_2x2_resumes_on_3x1_and_1x0_every_example_once_as_uninterrupted(tmp_path):
    pytest.importorskip("datasets")
    want = {kind: reference(kind) for kind in ("plain", "datasets")}
    head = trained("stop", 2, 2, tmp_path)
    for kind in want:
        assert 0 < len(head[kind]) < len(want[kind])
    for nproc, workers in ((3, 1), (1, 0)):
        tail = trained("resume", nproc, workers, tmp_path)
        for kind in want:
            assert sorted(head[kind] + tail[kind]) == want[kind], (kind, nproc, workers)
