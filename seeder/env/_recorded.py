"""Which environment variables a snapshot records with their values: an allowlist.

A snapshot records the *names* of all variables and the *values* only of those that change
numerics, performance or the run's layout (:data:`RECORDED_VARIABLES`). A value seeder was not
told is harmless is never written, whatever its shape: a token in ``MY_SETTING`` stays out of
``env.txt`` although no secret pattern knows it. Values of recorded variables still go through
the redaction of :mod:`seeder.env._redact` (a secret-named variable, ``CUDA_TOKEN`` say, stays
redacted).

Example:
    >>> from seeder.env._redact import Redactor
    >>> env = {"OMP_NUM_THREADS": "4", "MY_SETTING": "ghp_abc", "HF_TOKEN": "hf_x"}
    >>> recorded_environ(env, Redactor(env))
    {'HF_TOKEN': '<redacted>', 'MY_SETTING': '<not recorded>', 'OMP_NUM_THREADS': '4'}
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Optional

from seeder.env._redact import Redactor
from seeder.env._secretnames import REDACTED, is_secret_name

__all__ = [
    "IMPORTANT_VARIABLES",
    "RUN_VARIABLES",
    "RECORDED_VARIABLES",
    "NOT_RECORDED",
    "important_variable",
    "is_recorded",
    "recorded_environ",
]

#: Variables that change performance or numerics (``*`` matches any suffix), in the order a diff
#: lists them.
IMPORTANT_VARIABLES = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "CUDA_*",
    "NCCL_*",
    "OMP_*",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_*",
    "CUDNN_*",
    "PYTHONHASHSEED",
    "SEEDER_*",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_*",
    "PYTORCH_*",
    "MKL_*",
    "OPENBLAS_*",
    "KMP_*",
    "GOMP_*",
    "BLIS_*",
    "NUMEXPR_*",
    "HOROVOD_*",
    "XLA_FLAGS",
    "TF_*",
    "UCX_*",
    "FI_*",
    "NVSHMEM_*",
    "HIP_*",
    "HSA_*",
    "ROCR_*",
    "MIOPEN_*",
    "MALLOC_*",
    "LD_BIND_NOW",
    "PYTHONPATH",
    "PATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
)
#: Variables that describe the run: its ranks and launcher, the scheduler's job, Python's and the
#: frameworks' settings, the locale and time zone.
RUN_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_*",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_*",
    "SLURM_*",
    "OMPI_COMM_WORLD_*",
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "MV2_COMM_WORLD_*",
    "PYTHON*",
    "NVIDIA_*",
    "DALI_*",
    "HF_*",
    "TRANSFORMERS_*",
    "TOKENIZERS_PARALLELISM",
    "ACCELERATE_*",
    "PL_*",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "PWD",
)
#: Every variable whose value a snapshot records.
RECORDED_VARIABLES = IMPORTANT_VARIABLES + RUN_VARIABLES
#: What a snapshot writes for a variable whose value it does not record.
NOT_RECORDED = "<not recorded>"


def _rank(name: str, patterns: tuple) -> Optional[int]:
    for i, pattern in enumerate(patterns):
        if fnmatch.fnmatchcase(name, pattern):
            return i
    return None


def important_variable(name: str) -> Optional[int]:
    """The rank of ``name`` in :data:`IMPORTANT_VARIABLES` (lower = listed earlier), or ``None``.

    Args:
        name: an environment variable's name.

    Returns:
        The index of the first pattern that matches, or ``None`` when none does.

    >>> [important_variable(n) for n in ("LD_PRELOAD", "NCCL_DEBUG", "HOME")]
    [0, 3, None]
    """
    return _rank(name, IMPORTANT_VARIABLES)


def is_recorded(name: str) -> bool:
    """Whether a snapshot records the value of the variable ``name``.

    Args:
        name: an environment variable's name.

    Returns:
        ``True`` when ``name`` matches :data:`RECORDED_VARIABLES`.

    >>> is_recorded("CUDA_VISIBLE_DEVICES"), is_recorded("SLURM_NTASKS"), is_recorded("HOME")
    (True, True, False)
    """
    return _rank(name, RECORDED_VARIABLES) is not None


def recorded_environ(environ: Mapping[str, str], redactor: Redactor) -> dict[str, str]:
    """What a snapshot records of ``environ``: every name, sorted, and the values of recorded
    variables.

    Args:
        environ: the variables (``os.environ``).
        redactor: the redaction of the snapshot the record is written to.

    Returns:
        ``{name: value}``: a secret-named variable's value is ``<redacted>``, one not in
        :data:`RECORDED_VARIABLES` is :data:`NOT_RECORDED`, the others' values are redacted text.
    """
    return {
        name: (
            REDACTED
            if is_secret_name(name) and value
            else redactor.text(value)
            if is_recorded(name)
            else NOT_RECORDED
        )
        for name, value in sorted(environ.items())
    }
