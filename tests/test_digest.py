"""seeder.digest: stable, order-insensitive for dicts, sensitive to every value, dtype and shape."""

from __future__ import annotations

import copy
import io
import math

import numpy as np
import pytest
import torch

from seeder import digest


def test_golden_values_are_stable():
    # Pinned: a digest must not change between seeder releases, or old logs stop matching.
    assert digest(torch.arange(4, dtype=torch.float32)) == GOLDEN_ARANGE
    assert (
        digest({"lr": 0.1, "steps": [1, 2], "name": "x", "none": None, "flag": True}) == GOLDEN_DICT
    )


GOLDEN_ARANGE = "dc889fbcb3f4c1cbb619133c7b6a6edc6b18d0208e707b06e8962c480880371c"
GOLDEN_DICT = "fd48befd3613e0e48544ad4987319e07a2659bac670ad7b362d717f83114d64c"


def test_values_dtype_shape_and_types_matter():
    base = torch.arange(6, dtype=torch.float32)
    variants = [
        base.clone().fill_(1),
        base.double(),
        base.reshape(2, 3),
        base.int(),
        base[:5],
        base.bfloat16(),
    ]
    seen = {digest(base)} | {digest(v) for v in variants}
    assert len(seen) == 1 + len(variants)
    assert (
        len(
            {
                digest(1),
                digest(1.0),
                digest("1"),
                digest(True),
                digest([1]),
                digest(None),
                digest(b"1"),
            }
        )
        == 7
    )
    assert digest(0.0) != digest(-0.0)


def test_representation_does_not_matter():
    t = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    assert (
        digest(t)
        == digest(t.t().contiguous().t())
        == digest(t.numpy())
        == digest(torch.nn.Parameter(t.clone()))
    )
    assert digest({"a": 1, "b": [1, 2]}) == digest({"b": (1, 2), "a": 1})
    assert digest({3, 1, 2}) == digest({1, 2, 3})
    assert digest(float("nan")) == digest(math.nan)
    assert digest(np.float32(1.5)) == digest(torch.tensor(1.5))
    assert digest(t.to_sparse()) == digest(t)


def test_argument_boundaries_matter():
    assert digest("ab", "c") != digest("a", "bc")
    assert digest([1, 2], [3]) != digest([1], [2, 3])
    assert digest({"a": "b"}) != digest({"ab": ""})


def test_model_and_optimizer_change_after_a_step_and_survive_weights_only():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    before = digest(model, opt)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    after = digest(model, opt)
    assert before != after
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    model2 = copy.deepcopy(model)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    opt2.load_state_dict(loaded["opt"])
    model2.load_state_dict(loaded["model"])
    assert digest(model2, opt2) == after
    assert (
        digest(loaded["model"], loaded["opt"]) == after
    )  # a checkpoint digests like the live objects
    with torch.no_grad():
        model2[1].running_mean[0] += 1e-7  # a buffer, one ulp-ish change
    assert digest(model2, opt2) != after


def test_unsupported_types_raise_with_location():
    with pytest.raises(TypeError, match=r"builtins.object at argument 0\['k'\]"):
        digest({"k": object()})
    with pytest.raises(TypeError, match="dtype object"):
        digest(np.array([object()]))
