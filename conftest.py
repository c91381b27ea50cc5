"""Doctests of seeder's modules (``--doctest-modules``) skip where an optional package they need is absent.

``seeder/integrations/*`` import their framework and ``seeder/verify``'s statistics and figures
import scipy and matplotlib; without those packages their doctests skip with the reason, as the
suite's tests do (``tests/optional.py``). Any other import error is reported as an error.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests"))  # as tests/conftest.py does: the suite's helpers import by name
from optional import EXTRAS  # noqa: E402


#: Modules whose doctests need more than the module itself imports.
DOCTEST_NEEDS = {"seeder.verify.plan": "scipy"}  # its example builds a VerifyConfig (seeder.verify.session)


class _Absent(pytest.File):
    """A module of seeder's whose doctests cannot be collected here: skipped with the reason."""

    reason = ""

    def collect(self) -> Any:
        pytest.skip(self.reason)


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
    try:
        importlib.import_module(name)
        if name in DOCTEST_NEEDS:
            importlib.import_module(DOCTEST_NEEDS[name])
    except ImportError as exc:
        missing = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__  # an integration's own message
        top = str(getattr(missing, "name", None) or "").split(".")[0]
        if top not in EXTRAS or (top == "nvidia" and os.environ.get("SEEDER_REQUIRE_DALI") == "1"):
            return collectors  # a real error (or a DALI that CI requires): the doctest collector reports it
        absent = _Absent.from_parent(parent, path=file_path)
        absent.reason = (f"{name} needs {missing.name}, which is not installed "  # type: ignore[union-attr]
                         f"(pip install 'seeder[{EXTRAS[top]}]')")
        return [absent]
    return collectors
