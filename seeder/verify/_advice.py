"""What ``seeder locate`` tells the user: the first difference in a few lines, ending with the fix.

Example:
    >>> from seeder.verify._compare import Difference
    >>> rec = {"k": "op", "op": "aten::index_add_", "ph": "f", "mod": "model.pool",
    ...        "at": "train.py:12"}
    >>> lines = explain(Difference("kernel", 40, 1, rec, rec), hash_seed=None)
    >>> lines[0]
    'the runs part at step 1, operation 41: aten::index_add_ in model.pool (forward) at train.py:12'
    >>> "use_deterministic_algorithms(True)" in lines[-1]
    True
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

from seeder.verify._compare import Difference

__all__ = ["explain", "kernel_fix", "short_path", "HASH_SEED_CAUSES"]

#: Kinds of first difference a set's or dict's order (the hash seed) can cause: worth a re-run
#: with it fixed.
HASH_SEED_CAUSES = frozenset({"input", "path", "batch"})

_SCATTER = (
    "torch.use_deterministic_algorithms(True) (or seeder.env.enforce_determinism()) makes {op} "
    "deterministic on CUDA, at some cost in speed; or accumulate without atomics (sort the "
    "indices and use torch.segment_reduce, or a one-hot matrix product)"
)
_CUBLAS = (
    "set CUBLAS_WORKSPACE_CONFIG=:4096:8 before the process starts (seeder run does) and call "
    "torch.use_deterministic_algorithms(True)"
)
_CUDNN = (
    "set torch.backends.cudnn.deterministic = True and torch.backends.cudnn.benchmark = False "
    "(seeder.env.enforce_determinism() sets both), or torch.use_deterministic_algorithms(True)"
)
#: Operators (without the trailing ``_`` of in-place forms) and their fix.
_GROUPS = {
    _SCATTER: "index_add scatter_add scatter_reduce index_put _index_put_impl put index_reduce "
    "cumsum embedding_dense_backward _embedding_bag_dense_backward index_select_backward scatter "
    "bincount histc",
    _CUBLAS: "mm addmm bmm baddbmm matmul addmv mv linear _scaled_dot_product_efficient_attention "
    "_scaled_dot_product_flash_attention",
    _CUDNN: "convolution _convolution cudnn_convolution convolution_backward cudnn_batch_norm "
    "cudnn_batch_norm_backward _cudnn_rnn _cudnn_rnn_backward cudnn_convolution_transpose",
}
_FIXES: dict[str, str] = {f"aten::{op}": fix for fix, ops in _GROUPS.items() for op in ops.split()}


def kernel_fix(op: str) -> str:
    """The fix for a nondeterministic kernel of operator ``op`` (``'aten::index_add_'``).

    Args:
        op: the operator's qualified name.

    Returns:
        One sentence: the deterministic alternative or setting.
    """
    base = op[:-1] if op.endswith("_") and not op.endswith("__") else op
    if base in _FIXES:
        return _FIXES[base].format(op=op)
    if not op.startswith("aten::"):
        return (
            f"{op} is not one of torch's operators: its kernel gives different results for the "
            "same inputs (an order of accumulation that varies, atomics, threads, or a value from "
            "outside); make its reduction order fixed, or replace it with a deterministic "
            "implementation"
        )
    return (
        "torch.use_deterministic_algorithms(True) (or seeder.env.enforce_determinism()) selects "
        f"deterministic kernels, or raises at {op} if torch has none; on CUDA also set "
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 before the process starts (seeder run does)"
    )


def short_path(line: str) -> str:
    """``path:line`` relative to the current directory when under it."""
    path, sep, num = line.rpartition(":")
    if not sep or not os.path.isabs(path):
        return line
    rel = os.path.relpath(path)
    return f"{rel}:{num}" if not rel.startswith("..") else line


def _short_paths(text: str) -> str:
    """``Name (/abs/path.py:12, __getitem__)`` with the path as :func:`short_path` gives it."""
    return re.sub(r"\((\S+:\d+),", lambda m: f"({short_path(m.group(1))},", text)


def _where(rec: dict[str, Any]) -> str:
    phase = {"f": "forward", "b": "backward", "o": "optimizer step"}.get(rec.get("ph", ""), "")
    op = f"{rec['op']} in {rec['mod']}" if rec.get("mod") else rec["op"]
    at = short_path(rec.get("at", "")) or "an unknown line"
    if rec.get("ph") == "b" and rec.get("node"):
        return f"{op} ({phase}, {rec['node']} of the forward at {at})"
    return f"{op} ({phase}) at {at}"


def explain(d: Difference, hash_seed: Optional[bool]) -> list[str]:
    """The report: what parted the runs, where, and the fix.

    Args:
        d: the first difference.
        hash_seed: ``True`` when re-running with a fixed ``PYTHONHASHSEED`` made the runs
            agree there, ``False`` when they still differed, ``None`` when not tried.

    Returns:
        A few lines, the first naming the point, the last the fix.
    """
    rec, other = d.record, d.other
    head = f"the runs part at step {d.step}, operation {d.index + 1}"
    if d.kind == "none":
        return [
            f"no difference in {d.records} recorded operations up to step {d.step - 1}: the runs "
            "part in what seeder locate does not see (a value printed or logged from outside "
            "torch's operations)"
        ]
    if d.kind == "path":
        return [
            f"{head}: the runs ran different operations: {_where(rec)} in one, "
            f"{other.get('op', other.get('k'))} at {short_path(other.get('at', '?'))} in the other",
            "cause: control flow that depends on a value that differs between the runs"
            + _hash(hash_seed),
            "fix: " + _hash_fix(hash_seed, "make that value a function of the seed"),
        ]
    if d.kind == "kernel":
        return [
            f"{head}: {_where(rec)}",
            "cause: identical inputs, different outputs: a nondeterministic kernel",
            "fix: " + kernel_fix(rec["op"]),
        ]
    if d.kind == "generator":
        name = rec.get("gname", "a generator")
        if name.startswith("torch's default"):
            cause = (
                f"{name}'s state differs at this draw: something seeded it, or drew from it, "
                "outside seeder since the last seeder.reseed (a DataLoader without generator=, a "
                "library's own seeding)"
            )
            fix = (
                "pass generator=seeder.data.dataloader_generator() to DataLoaders; let "
                "seeder.reseed seed the global generators (no torch.manual_seed of your own with a "
                "value that varies)"
            )
        else:
            cause = (
                f"it draws from {name}, a generator seeded from something other than seeder (the "
                "clock, the OS, an unseeded default): its state differs at this draw"
            )
            fix = (
                f"seed it from seeder: seeder.register_generator({name.rsplit('.', 1)[-1]}) "
                "reseeds it at every seeder.reseed, or "
                ".manual_seed(seeder.get_seed(task, epoch, stream=k))"
            )
        return [f"{head}: {_where(rec)} (a random operation)", "cause: " + cause, "fix: " + fix]
    if d.kind == "batch":
        what = {
            "order": "the same samples in another order: the data order differs (a sampler or "
            "shuffle seeded outside seeder)",
            "content": "other samples or other sample content: the data order (a sampler or "
            "shuffle seeded outside seeder) or an augmentation or dataset RNG seeder does not own "
            "(a NumPy Generator or random.Random made without a seed)",
        }.get(d.order or "content")
        ds = rec.get("data")
        fed = (
            f" fed to {d.batch.get('mod', 'the model')} at "
            f"{short_path(d.batch.get('at', '')) or '?'}"
            if d.batch
            else ""
        )
        if rec.get("k") == "batch":
            entered = "before any operation on it"
        else:
            source = f" in dataset {_short_paths(ds)}" if isinstance(ds, str) and ds else ""
            entered = f"first seen at {_where(rec)}{source}"
        fix = (
            "use seeder.DataLoader (or seeder.DistributedSampler and "
            "generator=seeder.data.dataloader_generator())"
        )
        if d.order != "order":
            fix += (
                "; draw augmentation from seeded RNGs (seeder.data.SeededDataset, or "
                "np.random.default_rng(seeder.data.sample_seed(...)))"
            )
        return [
            f"{head}: the batch{fed} differs, {entered}",
            f"cause: {what}" + _hash(hash_seed),
            "fix: " + _hash_fix(hash_seed, fix),
        ]
    what = f"input {d.input}" if d.input >= 0 else "an argument"
    return [
        f"{head}: {what} of {_where(rec)} differs, and no earlier operation made it",
        "cause: a tensor made from a value outside torch's operations differs: Python or NumPy "
        "data, a value from the clock (time.time) or the OS (os.urandom, a process id)"
        + _hash(hash_seed),
        "fix: "
        + _hash_fix(
            hash_seed, "derive that value from the seed (seeder.get_seed) or make it constant"
        ),
    ]


def _hash(hash_seed: Optional[bool]) -> str:
    if hash_seed:
        return (
            "; with PYTHONHASHSEED fixed both runs agree here: the order of a Python set or dict "
            "keyed by str or bytes (the hash seed) decides it"
        )
    if hash_seed is False:
        return " (not the hash seed: with PYTHONHASHSEED fixed the runs still differ here)"
    return ""


def _hash_fix(hash_seed: Optional[bool], otherwise: str) -> str:
    if hash_seed:
        return (
            "iterate in a fixed order (sorted(the_set)) where the order reaches tensors, or start "
            "Python with a fixed PYTHONHASHSEED (seeder run sets one derived from the master seed)"
        )
    return otherwise
