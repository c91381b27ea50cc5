"""The public surface of ``seeder.integrations.*``: what each module defines, each documented.

Each integration module exports what a user builds or calls (``__all__``), keeps everything else
private, and documents each public class, function and method with the blocks that apply
(``Args:`` where it takes arguments) and a runnable ``Example:`` (run by the doctests).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest
from optional import need

#: module -> the optional packages it imports (its names are pinned by tests/test_public_api.py)
NEEDS = {
    "seeder.integrations.lightning": ("lightning",),
    "seeder.integrations.transformers": ("transformers", "accelerate"),
    "seeder.integrations.accelerate": ("accelerate",),
    "seeder.integrations.dcp": (),
}


def load(module: str) -> Any:
    """Import ``module``, or skip when a framework it needs is not installed."""
    for package in NEEDS[module]:
        need(package, module)
    return importlib.import_module(module)


def public_members(obj: Any) -> list[tuple[str, Any]]:
    """``obj`` and, for a class, the public methods and properties it defines itself."""
    members = [(obj.__qualname__, obj)]
    if inspect.isclass(obj):
        for name, value in vars(obj).items():
            if not name.startswith("_") and (
                inspect.isfunction(value) or isinstance(value, property)
            ):
                members.append((f"{obj.__qualname__}.{name}", value))
    return members


def takes_arguments(obj: Any) -> bool:
    """Whether a user passes arguments to ``obj`` (a class: its ``__init__``)."""
    if isinstance(obj, property):
        return False
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    return any(p.name != "self" for p in params)


@pytest.mark.parametrize("module", sorted(NEEDS))
def test_each_module_exports_the_public_names_it_defines_and_no_other(module: str) -> None:
    mod = load(module)
    defined = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module
    }
    assert set(mod.__all__) == defined, "a public name outside __all__: make it _private"


@pytest.mark.parametrize("module", sorted(NEEDS))
def test_each_public_name_and_method_is_documented_with_an_example(module: str) -> None:
    mod = load(module)
    missing = []
    for name in mod.__all__:
        for qualname, member in public_members(getattr(mod, name)):
            doc = inspect.getdoc(member) or ""
            if "Example:" not in doc:
                missing.append(f"{qualname}: no Example:")
            if takes_arguments(member) and "Args:" not in doc:
                missing.append(f"{qualname}: no Args:")
    assert not missing, missing
