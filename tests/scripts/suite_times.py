#!/usr/bin/env python
"""Per-file times of a test run, from pytest's JUnit XML (``--junitxml=FILE``).

    python tests/scripts/suite_times.py RUN.xml [--top N]
    python tests/scripts/suite_times.py BEFORE.xml AFTER.xml [--top N]

Prints each test file's seconds (setup, call and teardown of its tests: a module-scoped fixture
counts in its file) and test count, largest first, then the totals: the sum of the tests' times,
that sum over 2 (the wall time two idle workers, ``-n 2``, would need at best) and the run's own
wall time. Given two runs, it prints both side by side, sorted by the first; files only one run has
show a dash in the other's columns.
"""

from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def file_of(classname: str, root: Path = ROOT) -> str:
    """The file a JUnit ``classname`` names (``tests.test_x.TestY`` -> ``tests/test_x.py``,
    ``seeder.data._dali`` -> ``seeder/data/_dali.py``, a doctest's module), else the
    classname."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        for suffix in (".py", "/__init__.py"):
            path = "/".join(parts[:end]) + suffix
            if (root / path).is_file():
                return path
    return classname


class Run:
    """One JUnit XML file: seconds and test counts per file, the run's wall time."""

    def __init__(self, path: Path, root: Path = ROOT):
        tree = ET.parse(path)
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.tests: dict[str, int] = collections.Counter()
        self.wall = 0.0
        for suite in tree.iter("testsuite"):
            self.wall += float(suite.get("time", 0))
        for case in tree.iter("testcase"):
            name = file_of(case.get("classname", ""), root)
            self.seconds[name] += float(case.get("time", 0))
            self.tests[name] += 1

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def cell(run: Run, name: str) -> str:
    """``seconds (tests)`` of ``name`` in ``run``, or a dash."""
    if name not in run.seconds:
        return f"{'-':>8s} {'':>6s}"
    return f"{run.seconds[name]:8.1f} {f'({run.tests[name]})':>6s}"


def report(runs: list[Run], top: int) -> str:
    """The table: the ``top`` files of the first run, then every run's totals."""
    first = runs[0]
    names = sorted(first.seconds, key=first.seconds.get, reverse=True)[:top]
    lines = [f"{'file':50s}" + "".join(f" {'s (tests)':>15s}" for _ in runs)]
    for name in names:
        lines.append(f"{name:50s}" + "".join(f" {cell(run, name)}" for run in runs))
    rows = {
        "sum of test times (s)": lambda r: f"{r.total:15.1f}",
        "sum / 2 (s, 2 workers at best)": lambda r: f"{r.total / 2:15.1f}",
        "tests": lambda r: f"{sum(r.tests.values()):15d}",
        "wall time of the run (s)": lambda r: f"{r.wall:15.1f}",
    }
    for label, value in rows.items():
        lines.append(f"{label:50s}" + "".join(f" {value(run)}" for run in runs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="JUnit XML files (pytest --junitxml)")
    parser.add_argument("--top", type=int, default=25, help="files shown (default 25)")
    args = parser.parse_args(argv)
    print(report([Run(path) for path in args.runs], args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
