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

from .core import ENV_SEED, STATE_FORMAT_VERSION, Participant, Seeder
from .digest import digest
from .derive import DERIVATION_VERSION, Domain, derive_seed
from .determinism import DeterminismReport, enforce_determinism, enforce_reproducibility, python_hash_seed
from .environment import EnvDiff, capture_environment, default_snapshot_dir, diff_environments, load_snapshot
from .errors import SeederWarning, StateError
from . import dali  # noqa: E402  seeder.dali; imports no DALI, lets register_generator take DALI pipelines
from .sampler import DistributedSampler
from .workers import SeededDataset, WorkerInitFn, dataloader_generator, make_worker_init_fn, sample_seed, worker_init_fn

__version__ = "0.1.0"

_default = Seeder()


def default_seeder() -> Seeder:
    """The :class:`Seeder` behind the module-level functions."""
    return _default


init = _default.init
get_master_seed = _default.get_master_seed
reseed = _default.reseed
get_seed = _default.get_seed
register_generator = _default.register_generator
unregister_generator = _default.unregister_generator
state_dict = _default.state_dict
load_state_dict = _default.load_state_dict
check_state_dict = _default.check_state_dict
gather_state_dict = _default.gather_state_dict
fork_rng = _default.fork_rng

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
    "state_dict",
    "load_state_dict",
    "check_state_dict",
    "gather_state_dict",
    "fork_rng",
    "digest",
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
    "SeededDataset",
    "WorkerInitFn",
    "worker_init_fn",
    "make_worker_init_fn",
    "sample_seed",
    "dataloader_generator",
]
