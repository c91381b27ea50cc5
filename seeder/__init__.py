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
from typing import Any, Dict

__version__ = "0.1.0"

# Importing seeder is cheap (no torch until a name that needs it is used), so that
# `seeder run` and `seeder env diff` start fast and the launcher holds little memory.
_LAZY: Dict[str, str] = {
    "Seeder": "core", "default_seeder": "default", "ENV_SEED": "core", "Participant": "participant", "STATE_FORMAT_VERSION": "state",
    "digest": "digest", "Checkpoint": "checkpoint",
    "DERIVATION_VERSION": "derive", "Domain": "derive", "derive_seed": "derive",
    "DeterminismReport": "env.determinism", "enforce_determinism": "env.determinism",
    "enforce_reproducibility": "env.determinism", "python_hash_seed": "env.determinism",
    "EnvDiff": "env.diff", "capture_environment": "env.capture", "default_snapshot_dir": "env.capture",
    "diff_environments": "env.diff", "load_snapshot": "env.capture",
    "SeederWarning": "errors", "StateError": "errors",
    "DistributedSampler": "data.sampler", "DataLoader": "data.loader",
    "ElasticDataLoader": "data.elastic_loader", "IterableDataLoader": "data.iterable",
    "watch_loader": "data.audit", "stream_share": "data.streams",
    "StreamShare": "data.streams",
    "SeededDataset": "data.workers", "WorkerInitFn": "data.workers", "dataloader_generator": "data.workers",
    "make_worker_init_fn": "data.workers", "sample_seed": "data.workers", "worker_init_fn": "data.workers",
}
#: Module-level functions: the methods of the default Seeder.
_BOUND = ("init", "get_master_seed", "reseed", "get_seed", "register_generator", "unregister_generator",
          "state_dict", "load_state_dict", "check_state_dict", "gather_state_dict", "fork_rng", "join", "leave")
#: Modules that add participant factories (seeder.participant.add_factory), imported together with the core:
#: a DALI pipeline joins a seeder whatever the user imported first. They import no DALI themselves.
_FACTORIES = (".data.dali",)


def __getattr__(name: str) -> Any:
    if name in _BOUND:
        value = getattr(importlib.import_module(".default", __name__).default_seeder(), name)
    elif name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'seeder' has no attribute {name!r}")
    if f"{__name__}.core" in sys.modules:
        for module in _FACTORIES:
            if __name__ + module not in sys.modules:
                importlib.import_module(module, __name__)
    globals()[name] = value  # resolved once: later lookups are plain attribute reads
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY) | set(_BOUND))


__all__ = [
    "Seeder",
    "Participant",
    "SeederWarning",
    "StateError",
    "Domain",
    "DERIVATION_VERSION",
    "STATE_FORMAT_VERSION",
    "ENV_SEED",
    "derive_seed",
    "default_seeder",
    "init",
    "get_master_seed",
    "reseed",
    "get_seed",
    "register_generator",
    "unregister_generator",
    "join",
    "leave",
    "state_dict",
    "load_state_dict",
    "check_state_dict",
    "gather_state_dict",
    "fork_rng",
    "digest",
    "Checkpoint",
    "enforce_reproducibility",
    "enforce_determinism",
    "DeterminismReport",
    "python_hash_seed",
    "capture_environment",
    "default_snapshot_dir",
    "load_snapshot",
    "diff_environments",
    "EnvDiff",
    "DistributedSampler",
    "watch_loader",
    "DataLoader",
    "ElasticDataLoader",
    "IterableDataLoader",
    "stream_share",
    "StreamShare",
    "SeededDataset",
    "WorkerInitFn",
    "worker_init_fn",
    "make_worker_init_fn",
    "sample_seed",
    "dataloader_generator",
]
