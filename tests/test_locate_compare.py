"""seeder locate's parts in one process: fingerprints of real tensors, the first difference of two
runs' records (properties over generated records), and the recorder on a real model, forward,
backward and optimizer step."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder._run.fingerprint import generator_print, row_prints, tensor_print
from seeder._run.record import Recorder
from seeder.verify._compare import first_difference


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(allow_nan=False, width=32), min_size=1, max_size=40), st.data())
def test_a_fingerprint_changes_with_any_bit_and_only_then(values, data):
    t = torch.tensor(values, dtype=torch.float32)
    assert tensor_print(t) == tensor_print(t.clone())
    i = data.draw(st.integers(0, len(values) - 1))
    bit = data.draw(st.integers(0, 31))
    flipped = t.clone()
    flipped.view(torch.int32)[i] ^= 1 << bit
    assert tensor_print(flipped) != tensor_print(t)
    assert tensor_print(t.reshape(1, -1)) != tensor_print(t)  # the shape counts
    assert tensor_print(t.double()) != tensor_print(t)  # and the dtype


def test_fingerprints_of_views_rows_and_generators():
    a = torch.arange(12.0).reshape(3, 4)
    assert tensor_print(a.t()) == tensor_print(a.t().contiguous())  # the values, not the layout
    assert row_prints(a) == [tensor_print(a[i]) for i in range(3)]
    g = torch.Generator().manual_seed(1)
    before = generator_print(g)
    torch.rand(1, generator=g)
    assert generator_print(g) != before
    assert generator_print(torch.Generator().manual_seed(1)) == before


def _ops(n, draw):
    recs = []
    for i in range(n):
        recs.append(
            {
                "k": "op",
                "op": f"aten::op{draw(st.integers(0, 3))}",
                "in": [f"t{i}"],
                "args": "",
                "ph": "f",
                "mod": "m",
                "at": "x.py:1",
                "out": [f"t{i + 1}"],
            }
        )
    return recs


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_the_first_difference_is_found_and_classified(data):
    n = data.draw(st.integers(1, 30))
    a = _ops(n, data.draw)
    assert first_difference(a, [dict(r) for r in a]).kind == "none"
    k = data.draw(st.integers(0, n - 1))
    what = data.draw(st.sampled_from(["kernel", "generator", "input", "path"]))
    b = [dict(r) for r in a]
    if what == "kernel":
        b[k]["out"] = ["other"]
    elif what == "generator":
        a[k]["gen"], b[k]["gen"] = "g1", "g2"
    elif what == "input":
        a[k]["in"], b[k]["in"] = ["fresh-a"], ["fresh-b"]
    else:
        b[k]["op"] = "aten::something_else"
    if k + 1 < n:  # what follows differs too: only the first difference counts
        b[k + 1]["out"] = ["later"]
    d = first_difference(a, b)
    assert (d.kind, d.index) == (what, k)


def test_a_batch_in_another_order_and_one_with_other_content():
    batch = {
        "k": "batch",
        "mod": "model",
        "at": "t.py:9",
        "in": ["x"],
        "rows": [["r1", "r2", "r3"]],
    }
    other = dict(batch, **{"in": ["y"], "rows": [["r3", "r1", "r2"]]})
    d = first_difference([batch], [other])
    assert (d.kind, d.order) == ("batch", "order")
    d = first_difference([batch], [dict(batch, **{"in": ["y"], "rows": [["r1", "r2", "r9"]]})])
    assert (d.kind, d.order) == ("batch", "content")
    stack = {
        "k": "op",
        "op": "aten::stack",
        "in": ["s1", "s2"],
        "args": "0",
        "ph": "f",
        "mod": "",
        "at": "t.py:5",
        "data": "Data (t.py:2, __getitem__)",
        "out": ["x"],
    }
    d = first_difference([stack], [dict(stack, **{"in": ["s2", "s1"], "out": ["y"]})])
    assert (d.kind, d.order) == ("batch", "order")


@pytest.mark.parametrize("stop_after", [None, 1])
def test_the_recorder_sees_forward_backward_and_the_optimizer(tmp_path, stop_after):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.body(x))

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.from_numpy(np.ones((2, 3), dtype=np.float32))
    rec = Recorder(str(tmp_path), stop_after=stop_after)
    try:
        with rec:
            model(x).sum().backward()
            if stop_after is None:
                opt.step()
            else:
                with pytest.raises(SystemExit):  # a localisation run ends after the step asked for
                    opt.step()
    finally:
        rec.close()
    recs = [json.loads(line) for line in open(tmp_path / "ops.rank0.jsonl")]
    assert recs[0]["k"] == "batch" and recs[0]["mod"] == "model"
    ops = {(r["ph"], r["mod"], r["op"]) for r in recs if r["k"] == "op"}
    assert ("f", "model.body.0", "aten::addmm") in ops and ("f", "model.head", "aten::addmm") in ops
    assert ("b", "model.body.0", "aten::mm") in ops  # backward, named by the forward's module
    assert any(ph == "o" and mod == "optimizer (SGD.step)" for ph, mod, _ in ops)
    assert recs[-1] == {"k": "step", "n": 1}
    forward = [r for r in recs if r["k"] == "op" and r["ph"] == "f" and r["mod"]]
    line = f"test_locate_compare.py:{_line('return self.head')}"
    assert all(r["at"].endswith(line) for r in forward)


def _line(text):
    lines = open(__file__).read().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)
