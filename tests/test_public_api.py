"""The public surface, pinned: each public package's names, and every other module private.

A name added to or removed from a public package is a change users see: it fails here until
this list, README.md's API section and CHANGELOG.md say so.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from optional import need

PKG = Path(__file__).resolve().parents[1] / "seeder"

SEEDER = {
    *("init", "get_master_seed", "reseed", "get_seed", "register_generator"),
    *("unregister_generator", "state_dict", "load_state_dict", "gather_state_dict"),
    *("fork_rng", "join", "leave", "Seeder", "default_seeder", "Participant", "Checkpoint"),
    *("digest", "SeederWarning", "StateError", "DistributedSampler", "DataLoader"),
    *("ElasticDataLoader", "IterableDataLoader"),
}
PUBLIC = {
    "seeder.data": {
        *("watch_loader", "stream_share", "StreamShare", "SeededDataset", "WorkerInitFn"),
        *("worker_init_fn", "make_worker_init_fn", "sample_seed", "dataloader_generator"),
        "Mix",
    },
    "seeder.data.dali": {
        *("track", "get_tracked", "TrackedPipeline", "pipeline_seed", "pipeline_kwargs"),
        *("saved_checkpoints", "MAX_DALI_SEED", "require_dali"),
    },
    "seeder.env": {
        *("enforce_determinism", "enforce_reproducibility", "DeterminismReport"),
        *("python_hash_seed", "capture_environment", "default_snapshot_dir", "load_snapshot"),
        *("diff_environments", "EnvDiff"),
    },
    "seeder.verify": {
        *("Contract", "Metrics", "METRICS_ENV", "parse_metrics", "read_metrics"),
        *("default_command", "RunSpec", "RunResult", "RunFailed", "run_all", "VerifyConfig"),
        *("CompareConfig", "verify", "compare", "load", "VerifyData", "difference"),
    },
}
#: Integration modules and the framework each imports (the test skips where it is absent).
INTEGRATIONS = {
    "seeder.integrations.lightning": (
        "lightning",
        {"SeederCallback", "resume_path"},
    ),
    "seeder.integrations.transformers": (
        "transformers",
        {"SeederTrainer"},
    ),
    "seeder.integrations.accelerate": (
        "accelerate",
        {
            *("SeederAccelerator", "PreparedLoader", "save_checkpoint_state"),
            *("read_checkpoint_state", "load_checkpoint_state"),
        },
    ),
    "seeder.integrations.dcp": (None, {"SeederStateful"}),
}
#: The public modules (files under seeder/); every other module is private.
PUBLIC_FILES = {
    *("__init__.py", "__main__.py", "pyt.py", "data/__init__.py", "data/dali.py"),
    *("env/__init__.py", "verify/__init__.py", "integrations/__init__.py"),
    *("integrations/lightning.py", "integrations/transformers.py"),
    *("integrations/accelerate.py", "integrations/dcp.py"),
}


def _check(module_name: str, names: set[str]) -> None:
    module = importlib.import_module(module_name)
    assert set(module.__all__) == names, f"{module_name}.__all__ changed"
    assert len(module.__all__) == len(names), f"{module_name}.__all__ lists a name twice"
    for name in names:
        assert getattr(module, name) is not None, f"{module_name}.{name}"


def test_seeder_exports_exactly_its_names() -> None:
    import seeder
    import seeder.pyt

    _check("seeder", SEEDER)
    assert [n for n in dir(seeder) if not n.startswith("_")] == sorted(SEEDER)
    assert set(seeder.pyt.__all__) == SEEDER
    for name in SEEDER:
        assert getattr(seeder.pyt, name) is getattr(seeder, name), name


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_public_package_names(module_name: str) -> None:
    _check(module_name, PUBLIC[module_name])


@pytest.mark.parametrize("module_name", sorted(INTEGRATIONS))
def test_integration_names(module_name: str) -> None:
    framework, names = INTEGRATIONS[module_name]
    if framework:
        need(framework, module_name)
    _check(module_name, names)


def _private(path: Path) -> bool:
    """``_name`` or under a ``_package`` (``__init__``/``__main__`` are their package's)."""
    return any(p.startswith("_") and not p.startswith("__") for p in path.with_suffix("").parts)


def test_every_other_module_is_private() -> None:
    files = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")}
    assert PUBLIC_FILES <= files, f"public modules missing: {sorted(PUBLIC_FILES - files)}"
    leaked = sorted(f for f in files - PUBLIC_FILES if not _private(Path(f)))
    assert not leaked, f"modules neither public nor private (_name): {leaked}"
