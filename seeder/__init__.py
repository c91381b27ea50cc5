"""seeder: one master seed reproduces a whole PyTorch training run, and resumes it bit for bit.

The module-level functions are the methods of one default :class:`Seeder`.

Example:
    >>> import seeder
    >>> seeder.init(master_seed=42, ngpus=1, local_rank=0)
    >>> seeder.reseed(0, 0)          # task 0: initialisation
    >>> seeder.get_master_seed()
    42
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

__version__ = "0.1.0"

# Importing seeder is cheap (no torch until a name that needs it is used), so that
# `seeder run` and `seeder env diff` start fast and the launcher holds little memory.
_LAZY: dict[str, str] = {
    "Seeder": "_seeding.core",
    "default_seeder": "_seeding.default",
    "Participant": "_seeding.participant",
    "Checkpoint": "_checkpoint",
    "digest": "_digest",
    "SeederWarning": "_errors",
    "StateError": "_errors",
    "DistributedSampler": "data._sampler",
    "DataLoader": "data._loader",
    "ElasticDataLoader": "data._elastic_loader",
    "IterableDataLoader": "data._iterable",
}
#: Module-level functions: the methods of the default Seeder.
_BOUND = (
    "init",
    "get_master_seed",
    "reseed",
    "get_seed",
    "register_generator",
    "unregister_generator",
    "state_dict",
    "load_state_dict",
    "gather_state_dict",
    "fork_rng",
    "join",
    "leave",
)
#: Modules that add participant factories (a DALI pipeline joins a seeder whatever the user
#: imported first), imported together with the core. They import no DALI themselves.
_FACTORIES = ("seeder.data.dali",)
#: The public subpackages, imported on first attribute access.
_SUBPACKAGES = ("data", "env", "verify", "integrations", "pyt")


def __getattr__(name: str) -> Any:
    if name in _BOUND:
        value = getattr(importlib.import_module("seeder._seeding.default").default_seeder(), name)
    elif name in _SUBPACKAGES:  # `import seeder` then `seeder.data.x`, as with `import scipy`
        return importlib.import_module(f"seeder.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"seeder.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module 'seeder' has no attribute {name!r}")
    if "seeder._seeding.core" in sys.modules:
        for module in _FACTORIES:
            if module not in sys.modules:
                importlib.import_module(module)
    globals()[name] = value  # resolved once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])


__all__ = [*_BOUND, *_LAZY]
