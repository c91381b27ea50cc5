"""Environment snapshots and their diff, under one import path (``seeder.environment`` too).

The work is done in :mod:`seeder.env.capture` (write and read a snapshot),
:mod:`seeder.env.redact` (keep secrets out of it), :mod:`seeder.env.probe` (the
facts it records) and :mod:`seeder.env.diff` (compare two); this module re-exports
their public names.

Example:
    >>> redact_text("pip install -i https://alice:s3cret@pypi.example/simple x")
    'pip install -i https://<redacted>@pypi.example/simple x'
    >>> is_secret_name("HF_TOKEN"), is_secret_name("OMP_NUM_THREADS")
    (True, False)
"""
from __future__ import annotations

from .capture import SNAPSHOT_FORMAT, SNAPSHOT_VERSION, capture_environment, default_snapshot_dir, load_snapshot
from .diff import (DEFAULT_IGNORED_VARIABLES, IMPORTANT_VARIABLES, SECTIONS, Change, EnvDiff, diff_environments,
                   important_variable)
from .redact import REDACTED, SECRET_NAME_PARTS, is_secret_name, redact_argv, redact_environ, redact_text

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_VERSION",
    "REDACTED",
    "capture_environment",
    "default_snapshot_dir",
    "load_snapshot",
    "diff_environments",
    "EnvDiff",
    "Change",
    "is_secret_name",
    "redact_text",
    "redact_environ",
    "redact_argv",
    "important_variable",
    "DEFAULT_IGNORED_VARIABLES",
    "IMPORTANT_VARIABLES",
    "SECRET_NAME_PARTS",
    "SECTIONS",
]
