"""Doctests of seeder's modules (``--doctest-modules``) skip where an optional package is absent.

``seeder/integrations/*`` import their framework, and ``seeder/verify``'s statistics and figures
import scipy and matplotlib: without them those doctests skip with the reason, as the suite's
tests do (``tests/optional.py``). Any other import error is reported as an error.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))  # as tests/conftest.py does: the suite's modules by name
from optional import EXTRAS, missing  # noqa: E402

#: Modules whose doctests need more than the module imports
#: (a VerifyConfig: seeder.verify._session).
DOCTEST_NEEDS = {"seeder.verify._plan": "scipy"}


def _module_name(path: Path) -> str:
    """``seeder.x.y`` for a file of the package, else ``""``."""
    try:
        rel = path.resolve().relative_to(ROOT / "seeder")
    except ValueError:
        return ""
    if path.suffix != ".py":
        return ""
    return ".".join(("seeder", *rel.with_suffix("").parts)).removesuffix(".__init__")


def _absent_package(name: str) -> str:
    """The optional package that importing module ``name`` lacks, or ``""``.

    Called once the doctest collector failed to import ``name`` (in collection order: an import
    here, earlier, would bind ``seeder.<module>`` before ``seeder``'s lazy names resolve)."""
    try:
        importlib.import_module(name)
    except ImportError as exc:
        # an integration raises its own ImportError from the ModuleNotFoundError
        lacking = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
        found = str(getattr(lacking, "name", None) or "")
        top = found.split(".")[0]
        if top in EXTRAS and not (top == "nvidia" and os.environ.get("SEEDER_REQUIRE_DALI") == "1"):
            return found
    return ""  # importable, or a real error (or a DALI that CI requires): reported as it is


def _skipped(report: Any, path: Path, reason: str) -> Any:
    report.outcome, report.result = "skipped", []
    report.longrepr = (str(path), 0, f"Skipped: {reason}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: Any) -> Any:
    report = yield
    name = _module_name(Path(str(getattr(collector, "path", ""))))
    if not name or not isinstance(collector, pytest.Module):
        return report
    need = DOCTEST_NEEDS.get(name)
    if need and importlib.util.find_spec(need) is None:
        return _skipped(report, collector.path, missing(need, f"the doctest of {name}"))
    package = _absent_package(name) if report.failed else ""
    return _skipped(report, collector.path, missing(package, name)) if package else report


@pytest.fixture(autouse=True)
def _fresh_default_seeder(request: Any) -> Any:
    """Every doctest of ``seeder/`` starts from a fresh default seeder, whichever tests ran before
    it in this process (a loader an earlier example made stays registered on the default seeder;
    under pytest-xdist the order of a worker's tests is not the files' order)."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    from seeder._seeding.default import default_seeder

    default_seeder().reset()
    yield
    default_seeder().reset()


@pytest.fixture(autouse=True)
def _dali_examples(
    request: Any, doctest_namespace: dict[str, Any], _fresh_default_seeder: Any
) -> Any:
    """The examples of ``seeder.data.dali`` run with DALI, from a fresh default seeder.

    The examples of ``TrackedPipeline``'s methods continue the class example: ``noise`` (a DALI
    pipeline definition), ``seeder`` initialised with 42, pipeline 0 tracked and ``state`` (a
    ``seeder.state_dict()`` holding its checkpoint). Without DALI they skip, unless CI requires it.
    """
    name = getattr(request.node, "name", "")
    if not name.startswith("seeder.data.dali."):
        yield
        return
    if (
        importlib.util.find_spec("nvidia") is None
        or importlib.util.find_spec("nvidia.dali") is None
    ):
        if os.environ.get("SEEDER_REQUIRE_DALI") != "1":
            pytest.skip(missing("nvidia.dali", f"the example of {name}"))
    from nvidia.dali import fn, pipeline_def

    import seeder
    from seeder.data.dali import pipeline_kwargs, track

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def noise() -> Any:
        return fn.random.uniform(range=(0, 1))

    seeder.default_seeder().reset()
    doctest_namespace.update(seeder=seeder, noise=noise)
    if name.startswith("seeder.data.dali.TrackedPipeline."):
        seeder.init(42)
        pipe = noise(**pipeline_kwargs(0))
        pipe.build()
        track(pipe, 0)
        doctest_namespace["state"] = seeder.state_dict()
    yield
    seeder.default_seeder().reset()
