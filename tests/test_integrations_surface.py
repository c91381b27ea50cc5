"""The public surface of ``seeder.integrations.*``: exactly the names a user needs, each documented.

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

#: module -> (the optional packages it imports, its public names)
SURFACE = {
    "seeder.integrations.lightning": (("lightning",), {"SeederCallback", "resume_path"}),
    "seeder.integrations.transformers": (("transformers", "accelerate"), {"SeederTrainer"}),
    "seeder.integrations.accelerate": (
        ("accelerate",),
        {
            "SeederAccelerator",
            "PreparedLoader",
            "save_checkpoint_state",
            "read_checkpoint_state",
            "load_checkpoint_state",
        },
    ),
    "seeder.integrations.dcp": ((), {"SeederStateful"}),
}


def load(module: str) -> Any:
    """Import ``module``, or skip when a framework it needs is not installed."""
    for package in SURFACE[module][0]:
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


@pytest.mark.parametrize("module", sorted(SURFACE))
def test_each_module_exports_exactly_its_public_names(module: str) -> None:
    mod = load(module)
    assert set(mod.__all__) == SURFACE[module][1]
    defined = {
        name
        for name, value in vars(mod).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module
    }
    assert defined == SURFACE[module][1], "a public name outside __all__: make it _private"


@pytest.mark.parametrize("module", sorted(SURFACE))
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
