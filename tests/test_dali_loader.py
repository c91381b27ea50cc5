"""examples/dali_loader.py: the DALI CPU loader for the training example resumes exactly through
seeder.state_dict()."""

from __future__ import annotations

import io
import os
import sys
import warnings

import pytest
import torch
from helpers import REPO_ROOT

if os.environ.get("SEEDER_REQUIRE_DALI") == "1":
    import nvidia.dali  # noqa: F401

pytest.importorskip(
    "nvidia.dali",
    reason="NVIDIA DALI is not installed here (pip install 'seeder[dali]', "
    "i.e. nvidia-dali-cuda120); its wheels exist only for Linux",
)
sys.path.insert(0, str(REPO_ROOT / "examples"))
from dali_loader import DaliLoader  # noqa: E402

from seeder import Seeder, SeederWarning  # noqa: E402

KW = dict(batch_size=4, dataset_size=24, image_size=10, crop=8, channels=3, num_classes=4)


def loader(master=42, state=None, **kw):
    s = Seeder()
    s.init(master, **kw)
    return s, DaliLoader(state=state, seeder_obj=s, **KW)


def epochs(s, ld, first_epoch, n_epochs, stop_after=None):
    """Train-loop shaped consumption: reseed per epoch, iterate the loader; stop after
    ``stop_after`` batches."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeederWarning)
        for epoch in range(first_epoch, first_epoch + n_epochs):
            s.reseed(1, epoch)
            for images, labels in ld:
                out.append((images.clone(), labels.clone()))
                if stop_after is not None and len(out) == stop_after:
                    return out
    return out


def equal(a, b):
    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b)
    )


def test_batches_shapes_and_epochs():
    s, ld = loader()
    assert len(ld) == 6
    run = epochs(s, ld, 0, 2)
    assert len(run) == 12
    images, labels = run[0]
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.float32
    assert labels.shape == (4,) and labels.dtype == torch.int64
    first = sorted(int(v) for b in run[:6] for v in b[1])
    assert first == sorted(
        int(v) for b in run[6:] for v in b[1]
    )  # each epoch sees the whole data set ...
    assert not equal(run[:6], run[6:])  # ... in a new order with new augmentation
    s2, ld2 = loader(master=43)
    assert not equal(run, epochs(s2, ld2, 0, 2))


@pytest.mark.parametrize("stop", [3, 6, 8])
def test_kill_and_resume_mid_epoch_and_at_epoch_end(stop):
    s, ld = loader()
    full = epochs(s, ld, 0, 3)

    s1, ld1 = loader()
    got = epochs(s1, ld1, 0, 3, stop_after=stop)
    buf = io.BytesIO()
    torch.save({"seeder": s1.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)["seeder"]

    s2, ld2 = loader(state=state)
    s2.load_state_dict(state)
    epoch = stop // len(ld)
    got += epochs(s2, ld2, epoch, 3 - epoch)
    assert equal(got, full)


def test_ranks_take_disjoint_shards():
    s0, ld0 = loader(rank=0, ngpus=2)
    s1, ld1 = loader(rank=1, ngpus=2)
    assert len(ld0) == len(ld1) == 3
    r0, r1 = epochs(s0, ld0, 0, 1), epochs(s1, ld1, 0, 1)
    labels0 = [int(v) for b in r0 for v in b[1]]
    assert sorted(labels0 + [int(v) for b in r1 for v in b[1]]) == sorted(i % 4 for i in range(24))
