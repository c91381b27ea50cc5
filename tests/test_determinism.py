"""Deterministic mode, PYTHONHASHSEED derivation, and Seeder.init(deterministic=, snapshot_dir=)."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings

import pytest
import torch
from helpers import run_python

import seeder
from seeder import Seeder, SeederWarning
from seeder._seeding.derive import Domain, derive_seed, numpy_seed
from seeder._seeding.determinism import (
    CUBLAS_WORKSPACE_DEFAULT,
    enforce_determinism,
    python_hash_seed,
)

_VARS = (
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTHONHASHSEED",
    "HOROVOD_FUSION_THRESHOLD",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "SEEDER_DETERMINISTIC",
    "SEEDER_SNAPSHOT_DIR",
)


def _torch_flags():
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )


@pytest.fixture
def clean():
    """No launch variables set; torch flags and os.environ restored afterwards."""
    saved_env, saved_flags = dict(os.environ), _torch_flags()
    for var in _VARS:
        os.environ.pop(var, None)
    torch.use_deterministic_algorithms(False)
    yield
    os.environ.clear()
    os.environ.update(saved_env)
    torch.use_deterministic_algorithms(saved_flags[0], warn_only=saved_flags[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = (
        saved_flags[2],
        saved_flags[3],
    )


def test_enforce_sets_torch_cudnn_and_cublas_and_reports(clean, caplog):
    torch.backends.cudnn.benchmark = True
    cuda_started = (
        torch.cuda.is_initialized()
    )  # on a CUDA machine an earlier test may have started it
    with (
        caplog.at_level(logging.INFO, logger="seeder"),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        report = enforce_determinism()
    assert _torch_flags() == (True, False, True, False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE_DEFAULT == ":4096:8"
    hash_advice = [a for a in report.advice if "PYTHONHASHSEED" in a]
    assert (
        len(hash_advice) == 1
        and "PYTHONHASHSEED is unset" in hash_advice[0]
        and "seeder run" in hash_advice[0]
    )
    assert (
        not report.ok
        and "PYTHONHASHSEED is unset" in caplog.text
        and "use_deterministic_algorithms" in caplog.text
    )
    assert "advice: PYTHONHASHSEED" in str(report)
    if not cuda_started:  # nothing came too late
        assert any("CUBLAS_WORKSPACE_CONFIG=:4096:8 (was unset)" in a for a in report.applied)
        assert (
            report.failed == []
            and len(report.advice) == 1
            and "NOT set" not in str(report)
            and not caught
        )
    else:  # cuBLAS may have read its configuration already: said loudly, with the fix
        assert (
            len(report.failed) == 1
            and "already initialised" in report.failed[0]
            and "NOT set" in str(report)
        )
        assert [w.category for w in caught] == [SeederWarning] and len(report.advice) == 2
    # the real effect on CPU: uninitialised memory is filled (NaN) so that it cannot leak run-to-run
    # noise
    assert torch.empty(8).isnan().all()


def test_warn_only_and_existing_settings_are_kept(clean):
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    os.environ["PYTHONHASHSEED"] = "123"
    report = enforce_determinism(warn_only=True)
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert report.ok and report.advice == [] and report.failed == []
    assert any("PYTHONHASHSEED=123" in a for a in report.applied)


@pytest.mark.parametrize(
    "name, value, expect",
    [
        ("CUBLAS_WORKSPACE_CONFIG", "4096", "is not a workspace configuration"),
        ("PYTHONHASHSEED", "random", "PYTHONHASHSEED=random"),
        ("PYTHONHASHSEED", "99999999999", "not an integer in [0, 4294967295]"),
    ],
)
def test_bad_launch_values_get_advice_and_are_left_alone(clean, name, value, expect):
    os.environ[name] = value
    report = enforce_determinism()
    assert os.environ[name] == value
    assert any(expect in a for a in report.advice), report.advice


def test_horovod_fusion_threshold(clean):
    enforce_determinism()
    assert "HOROVOD_FUSION_THRESHOLD" not in os.environ  # no Horovod here
    os.environ["HOROVOD_RANK"] = "0"  # what horovodrun sets
    report = enforce_determinism()
    assert os.environ["HOROVOD_FUSION_THRESHOLD"] == "0" and any(
        "HOROVOD_FUSION_THRESHOLD=0" in a for a in report.applied
    )
    del os.environ["HOROVOD_RANK"], os.environ["HOROVOD_FUSION_THRESHOLD"]
    enforce_determinism(horovod=True)
    assert os.environ["HOROVOD_FUSION_THRESHOLD"] == "0"


@pytest.mark.parametrize("kwargs", [{"warn_only": "yes"}, {"warn_only": 1}, {"horovod": "auto"}])
def test_bad_input_raises_and_changes_nothing(clean, kwargs):
    before_flags, before_env = _torch_flags(), dict(os.environ)
    with pytest.raises(TypeError, match="must be"):
        enforce_determinism(**kwargs)
    assert _torch_flags() == before_flags and dict(os.environ) == before_env


def test_python_hash_seed_is_the_documented_derivation():
    for seed in (0, 1, 42, 2**63 - 1):
        value = python_hash_seed(seed)
        assert 0 <= value <= 4294967295
        assert value == numpy_seed(derive_seed(seed, Domain.SHARED, 2**32 - 1, 0, 0, 0))
    assert (
        python_hash_seed(42) == 242808462
    )  # pinned: runs launched with --seed 42 keep their hash order
    assert len({python_hash_seed(s) for s in range(100)}) == 100
    with pytest.raises(ValueError):
        python_hash_seed(-1)
    with pytest.raises(TypeError):
        python_hash_seed("42")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cublas_setting_before_and_after_cuda_starts():
    before = (
        "import torch, seeder; r = seeder.env.enforce_determinism(); a = torch.randn(64, 64, "
        "device='cuda'); b = a @ a; torch.cuda.synchronize(); print('OK', r.failed == [])"
    )
    out = run_python(["-c", before], env={"CUBLAS_WORKSPACE_CONFIG": ""}).stdout
    assert "OK True" in out
    after = (
        "import warnings, torch, seeder; torch.zeros(1, device='cuda'); "
        "w = warnings.catch_warnings(record=True); caught = w.__enter__(); "
        "warnings.simplefilter('always'); r = seeder.env.enforce_determinism(); print('FAILED', "
        "len(r.failed), any('too late' in str(c.message) or 'already initialised' in "
        "str(c.message) for c in caught))"
    )
    out = run_python(["-c", after], env={"CUBLAS_WORKSPACE_CONFIG": ""}).stdout
    assert "FAILED 1 True" in out


# ------------------------------------------------------------------ Seeder.init(deterministic=,
# snapshot_dir=)


def test_init_deterministic_argument_and_variable(clean):
    Seeder().init(1)
    assert not torch.are_deterministic_algorithms_enabled()
    Seeder().init(1, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    os.environ["SEEDER_DETERMINISTIC"] = "1"  # what `seeder run --deterministic` sets
    Seeder().init(1)
    assert torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    Seeder().init(1, deterministic=False)  # the argument wins over the variable
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize(
    "kwargs, env, error",
    [
        ({"deterministic": "yes"}, {}, TypeError),
        ({}, {"SEEDER_DETERMINISTIC": "maybe"}, ValueError),
        ({"snapshot_dir": 5}, {}, TypeError),
        ({"snapshot_dir": "snap"}, {}, TypeError),  # init takes no snapshot: the error says how
    ],
)
def test_init_bad_arguments_change_nothing(clean, tmp_path, kwargs, env, error):
    s = Seeder()
    s.init(3)
    os.environ.update(env)
    with pytest.raises(error):
        s.init(4, **kwargs)
    assert s.get_master_seed() == 3 and not torch.are_deterministic_algorithms_enabled()


def test_init_takes_no_snapshot_and_says_where_one_is_taken(clean, tmp_path):
    with pytest.raises(TypeError, match="capture_environment"):
        Seeder().init(5, snapshot_dir=tmp_path / "snap")
    os.environ["SEEDER_SNAPSHOT_DIR"] = str(tmp_path / "snap")
    with pytest.warns(SeederWarning, match="takes no environment snapshot.*seeder run"):
        Seeder().init(5)  # a run no tool started: the variable asks for what nobody does
    assert not (tmp_path / "snap").exists()


def test_seeder_run_snapshot_once_on_rank_0_only(clean, tmp_path, fresh_default):
    """The hook ``seeder run`` installs where ``$SEEDER_SNAPSHOT_DIR`` is set (the tools'
    bootstrap) writes rank 0's snapshot at init, once per directory."""
    from seeder._run import bootstrap

    snap = tmp_path / "snap"
    os.environ["SEEDER_SNAPSHOT_DIR"] = str(snap)
    bootstrap.install()
    try:
        fresh_default.init(5)
        manifest = json.loads((snap / "manifest.json").read_text())
        assert manifest["run"]["extra"] == {"master_seed": 5, "world_size": 1}
        (snap / "manifest.json").unlink()
        fresh_default.init(6)  # the same directory again in this process: not captured again
        assert not (snap / "manifest.json").exists()
        os.environ["SEEDER_SNAPSHOT_DIR"] = str(tmp_path / "rank1")
        fresh_default.init(5, ngpus=2, rank=1)
        assert not (tmp_path / "rank1").exists()
        existing = tmp_path / "existing"
        existing.mkdir()
        (existing / "manifest.json").write_text("{}")
        os.environ["SEEDER_SNAPSHOT_DIR"] = str(existing)
        with pytest.warns(SeederWarning, match="already holds a snapshot"):
            fresh_default.init(5)  # an existing snapshot is kept, training goes on
        assert (existing / "manifest.json").read_text() == "{}"
    finally:
        bootstrap.uninstall()


def test_seeder_run_installs_the_snapshot_hook(tmp_path):
    code = "import seeder; seeder.init(7)"
    env = {"SEEDER_SNAPSHOT_DIR": str(tmp_path / "snap")}
    run_python(["-m", "seeder", "run", "-q", "--", sys.executable, "-c", code], env=env)
    manifest = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    assert manifest["run"]["extra"]["master_seed"] == 7


def test_module_level_init_accepts_the_new_arguments(fresh_default, clean):
    fresh_default.init(9, deterministic=True)
    assert seeder.get_master_seed() == 9 and torch.are_deterministic_algorithms_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = seeder.env.enforce_determinism()
    assert isinstance(report, seeder.env.DeterminismReport)
