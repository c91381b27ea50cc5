"""Doctests of seeder's modules (``--doctest-modules``) skip where an optional package is absent.

``seeder/integrations/*`` import their framework, and ``seeder/verify``'s statistics and figures
import scipy and matplotlib: without them those doctests skip with the reason, as the suite's
tests do (``tests/optional.py``). Any other import error is reported as an error.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))  # as tests/conftest.py does: the suite's modules by name
from optional import EXTRAS, missing  # noqa: E402

#: Modules whose doctests need more than the module imports (a VerifyConfig: seeder.verify.session).
DOCTEST_NEEDS = {"seeder.verify.plan": "scipy"}


class _Absent(pytest.File):
    """A module of seeder's whose doctests cannot run here: skipped with the reason."""

    reason = ""

    def collect(self) -> Any:
        pytest.skip(self.reason)


def _absent_package(name: str) -> str:
    """The optional package that importing module ``name`` (and its doctests) lacks, or ``""``."""
    try:
        importlib.import_module(name)
        if name in DOCTEST_NEEDS:
            importlib.import_module(DOCTEST_NEEDS[name])
    except ImportError as exc:
        # an integration raises its own ImportError from the ModuleNotFoundError
        lacking = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
        found = str(getattr(lacking, "name", None) or "")
        top = found.split(".")[0]
        if top in EXTRAS and not (top == "nvidia" and os.environ.get("SEEDER_REQUIRE_DALI") == "1"):
            return found
    return ""  # importable, or a real error (or a DALI that CI requires): the doctests report it


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    collectors = yield
    try:
        rel = file_path.resolve().relative_to(ROOT / "seeder")
    except ValueError:
        return collectors
    if file_path.suffix != ".py" or not collectors:
        return collectors
    name = ".".join(("seeder", *rel.with_suffix("").parts)).removesuffix(".__init__")
    package = _absent_package(name)
    if not package:
        return collectors
    absent = _Absent.from_parent(parent, path=file_path)
    absent.reason = missing(package, name)
    return [absent]
