"""The first point where two localisation runs part, read from their operation records.

Two runs with the same seed record the same operations with the same fingerprints up to
the first thing that differs. Walking both records side by side, the first record that
differs says what kind of thing parted them:

* ``kernel``: an operation whose inputs (and generator state) were identical and whose
  outputs differ: a nondeterministic kernel;
* ``generator``: a random operation whose generator's state differs: a generator seeded
  from something other than seeder;
* ``batch``: a batch that differs while it is fetched (torch's data loading) or where it
  enters the top-level module, before any operation made it: the data order or content;
* ``input``: an operation whose input no earlier operation made (a tensor built from
  Python or NumPy data, a value from the clock or the OS, a set's order);
* ``path``: the runs ran different operations (control flow that depends on such a value);
* ``none``: no difference in what was recorded.

Example:
    >>> a = [{"k": "op", "op": "aten::add", "in": ["1", "2"], "args": "", "ph": "f", "mod": "m",
    ...       "at": "t.py:3",
    ...       "out": ["3"]}]
    >>> b = [dict(a[0], out=["4"])]
    >>> f = first_difference(a, b); f.kind, f.record["op"], f.index
    ('kernel', 'aten::add', 0)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["Difference", "first_difference", "read_records"]


@dataclass
class Difference:
    """The first difference between two runs' records (``kind`` as in the module docstring)."""

    kind: str
    index: int = -1  #: the record's index (0-based) in both files
    step: int = 1  #: the optimizer step it belongs to (1-based: the step that was running)
    record: dict[str, Any] = field(default_factory=dict)  #: run A's record
    other: dict[str, Any] = field(default_factory=dict)  #: run B's record
    input: int = -1  #: for ``input`` and ``batch``: which tensor input differs
    #: for ``batch``: ``'order'`` (same samples, another order), ``'content'`` or ``''``
    order: str = ""
    #: for ``batch``: run A's record of it entering the model
    batch: dict[str, Any] = field(default_factory=dict)
    records: int = 0  #: records compared


def read_records(path: str) -> Iterator[dict[str, Any]]:
    """The records of one run's ``ops.rank<R>.jsonl`` (a last line cut short is dropped)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                return


def _samples(records: list[dict[str, Any]], j: int) -> list[str]:
    """The per-sample fingerprints of a differing tensor: a batch's rows, or a collate's inputs."""
    rec = records[0]
    if rec.get("k") == "batch":
        rows = rec.get("rows") or []
        return rows[j] if j < len(rows) else []
    return list(rec.get("in", []))


def _order(a: dict[str, Any], b: dict[str, Any], j: int) -> str:
    sa, sb = _samples([a], j), _samples([b], j)
    if len(sa) > 1 and Counter(sa) == Counter(sb):
        return "order"
    return "content"


def _next_batch(rest: Iterator[dict[str, Any]]) -> Optional[dict[str, Any]]:
    for rec in rest:
        if rec.get("k") == "batch":
            return rec
        if rec.get("k") == "step":
            return None
    return None


def first_difference(a: Iterable[dict[str, Any]], b: Iterable[dict[str, Any]]) -> Difference:
    """Walk two runs' records side by side and classify the first one that differs.

    Args:
        a: run A's records (from :func:`read_records`).
        b: run B's records.

    Returns:
        A :class:`Difference`; kind ``none`` when every record agrees (``records`` says how many).
    """
    ia, ib = iter(a), iter(b)
    made_a: set = set()  # fingerprints of every tensor an operation of run A made so far
    step, i = 1, 0
    for i, (ra, rb) in enumerate(zip(ia, ib)):
        if ra == rb:
            if ra.get("k") == "step":
                step = ra["n"] + 1
            made_a.update(ra.get("out", ()))
            continue
        return _classify(Difference("path", i, step, ra, rb, records=i), ia, ib, made_a)
    return Difference("none", records=i + 1 if i else 0, step=step)


def _classify(
    d: Difference, ia: Iterator[dict[str, Any]], ib: Iterator[dict[str, Any]], made_a: set
) -> Difference:
    """Set the kind of the first differing records ``d.record`` and ``d.other`` (``path`` when
    none fits); ``ia``/``ib`` are the records after them, ``made_a`` what run A's operations
    made before."""
    ra, rb = d.record, d.other
    if ra.get("k") != rb.get("k") or ra.get("op") != rb.get("op"):
        return d
    if ra["k"] == "batch":
        j = next((j for j, (x, y) in enumerate(zip(ra["in"], rb["in"])) if x != y), 0)
        d.kind, d.input, d.order, d.batch = "batch", j, _order(ra, rb, j), ra
        return d
    if ra["k"] != "op":
        return d
    if ra.get("gen") != rb.get("gen"):
        d.kind = "generator"
    elif ra["in"] != rb["in"] or ra["args"] != rb["args"]:
        _input_differs(d, ia, ib, made_a)
    elif ra["out"] != rb["out"]:
        d.kind = "kernel"
    # else the same operation, inputs and outputs, in another module or line: another path
    return d


def _input_differs(
    d: Difference, ia: Iterator[dict[str, Any]], ib: Iterator[dict[str, Any]], made_a: set
) -> None:
    """An operation whose inputs differ: a batch being fetched, or an input no recorded operation
    made (the batch on its way in, or a value from outside torch)."""
    ra, rb = d.record, d.other
    diff = [j for j, (x, y) in enumerate(zip(ra["in"], rb["in"])) if x != y]
    d.input = diff[0] if diff else -1
    if ra.get("data"):  # while a batch is fetched (a collate's stack, a dataset's own operations)
        na, nb = _next_batch(ia), _next_batch(ib)
        d.kind, d.batch = "batch", na or {}
        d.order = _order(ra, rb, d.input) if ra["op"] in ("aten::stack", "aten::cat") else ""
        if not d.order:
            d.order = _order(na, nb, 0) if na and nb else "content"
        return
    d.kind = "input"  # a tensor no recorded operation made, or changed outside them
    # not torch.tensor(data): is it the batch, on its way in?
    if ra["op"] != "aten::lift_fresh" and d.input >= 0:
        na, nb = _next_batch(ia), _next_batch(ib)
        if na and nb and na["in"] != nb["in"] and ra["in"][d.input] not in made_a:
            d.kind, d.order, d.batch = "batch", _order(na, nb, 0), na
