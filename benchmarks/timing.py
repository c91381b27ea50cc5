"""Shared by the benchmarks: interleaved median timing, and Lightning's seeding functions from the
installed package.

Import from a benchmark script (``benchmarks/`` is on ``sys.path`` when one runs).
"""

from __future__ import annotations

import importlib
import statistics
import time
from typing import Any, Callable


def interleaved_medians_us(
    fns: list[Callable[[], Any]],
    repeat: int,
    number: int,
    timer: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Median time per call of each ``fn`` in microseconds (``timer``: wall time by default).

    Rounds alternate between the functions, so a load spike on a shared machine hits all of them
    alike and the ratios stay meaningful even when absolute times do not.
    """
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = timer()
            for _ in range(number):
                fn()
            times[i].append((timer() - t0) / number)
    return [statistics.median(t) * 1e6 for t in times]


def lightning_seed_module() -> tuple[Any, str]:
    """Lightning's ``utilities.seed`` module and ``"<package> <version>"``: ``lightning.fabric``
    (the ``lightning`` package), else the standalone ``lightning_fabric``; ``SystemExit`` naming the
    install when neither exists."""
    for package, module in (
        ("lightning", "lightning.fabric.utilities.seed"),
        ("lightning_fabric", "lightning_fabric.utilities.seed"),
    ):
        try:
            seed = importlib.import_module(module)
        except ImportError:
            continue
        return seed, f"{module} ({package} {importlib.import_module(package).__version__})"
    raise SystemExit("the baseline needs Lightning: pip install lightning (or lightning-fabric)")
