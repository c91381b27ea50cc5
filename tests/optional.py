"""Optional packages the tests use: one skip that says what is missing and which extra installs it.

seeder needs torch and NumPy; everything else is an extra of ``setup.py``. A test (or a test
module, at its top) that needs one calls :func:`need`: where the package is absent the test
skips with the reason. DALI is the exception CI makes: with ``SEEDER_REQUIRE_DALI=1`` (set by
``.ci/run``) a missing DALI is an error, not a skip.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Iterable
from types import ModuleType

import pytest

#: The extra of ``setup.py`` that installs each optional package (by top-level module).
EXTRAS = {
    "lightning": "lightning",
    "jsonargparse": "lightning",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "datasets": "test",
    "torchdata": "test",
    "scipy": "plot",
    "matplotlib": "plot",
    "nbclient": "plot",
    "nbformat": "plot",
    "tqdm": "plot",
    "nvidia": "dali",
}


def need(module: str, why: str = "") -> ModuleType:
    """Import ``module``, or skip the caller saying what is missing and what installs it.

    Args:
        module: a dotted module name whose top level is one of :data:`EXTRAS`.
        why: what needs it, for the reason (default: the module's name).

    Returns:
        The imported module.

    Raises:
        ModuleNotFoundError: for ``nvidia.dali`` when ``SEEDER_REQUIRE_DALI=1`` and DALI is absent.

    Example (at the top of a test module, or inside one test)::

        stats = need("scipy.stats", "the uniformity test")
    """
    __tracebackhide__ = True  # a skip names the test's line, not this one
    top = module.split(".")[0]
    if top == "nvidia" and os.environ.get("SEEDER_REQUIRE_DALI") == "1":  # CI: DALI must be there
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=missing(module, why))


def missing(module: str, why: str) -> str:
    """The reason of a skip: ``why`` needs ``module``, and the extra that installs it."""
    extra = EXTRAS[module.split(".")[0]]
    return f"{why or module} needs {module}, which is not installed (pip install 'seeder[{extra}]')"


def need_installed(modules: Iterable[str], why: str) -> None:
    """Skip the caller unless each of ``modules`` is installed: found, not imported (cheap).

    Args:
        modules: dotted module names whose top levels are in :data:`EXTRAS`.
        why: what needs them, for the reason.
    """
    __tracebackhide__ = True
    for module in modules:
        top = module.split(".")[0]
        package = "nvidia.dali" if top == "nvidia" else top  # other packages share nvidia.*
        if top == "nvidia" and os.environ.get("SEEDER_REQUIRE_DALI") == "1":
            continue  # CI: a missing DALI fails where it is used
        try:
            found = importlib.util.find_spec(package) is not None
        except ModuleNotFoundError:  # nvidia.dali without any nvidia package
            found = False
        if not found:
            pytest.skip(missing(package, why))


def need_verify(figures: bool = True) -> None:
    """Skip unless ``seeder verify`` can run: its statistics need scipy, its figures matplotlib.

    Args:
        figures: whether the test lets verify draw its figures (``figures=False`` / ``--no-figures``
            need no matplotlib).
    """
    __tracebackhide__ = True
    need("scipy", "seeder verify (its statistics)")
    if figures:
        need("matplotlib", "seeder verify's figures")
