"""Every private name or layout of another library that seeder relies on, each checked at first use.

Where no public API does the job, seeder reads or overrides a private name of torch, NumPy,
DALI, Lightning, transformers or accelerate (never an object's memory: RNG states go through
the libraries' public state APIs). Each such name is listed in :data:`INTERNALS` with the
versions it was checked on, and each use goes through :func:`require` (the dependency still
works the way seeder relies on, else :class:`DependencyChanged` naming the library and its
version) or :func:`degrade` (a :class:`seeder.SeederWarning` naming them and what seeder does
without the name). A changed dependency is never a silent change of behaviour.

Example:
    >>> INTERNALS["torch:DataLoader._get_iterator"].library
    'torch'
    >>> require("torch:DataLoader._get_iterator")
    True
    >>> require("nvidia-dali:_DaliBaseIterator._pipes", object())
    Traceback (most recent call last):
    ...
    seeder._internals.DependencyChanged: nvidia-dali ... changed: object has no attribute ...
"""

from __future__ import annotations

import importlib.metadata
import platform
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, cast

from seeder._errors import SeederWarning

__all__ = [
    "Internal",
    "INTERNALS",
    "DependencyChanged",
    "require",
    "degrade",
    "library_version",
    "references",
]


@dataclass(frozen=True)
class Internal:
    """One private name seeder uses: whose it is, what for, what it was checked on, what happens
    when it changes.

    ``check(obj)`` returns ``None`` while the dependency works the way seeder relies on, else what
    changed; ``obj`` is the object at hand (a pipeline, a checkpoint) for checks that need one.
    """

    library: str  #: distribution name (``importlib.metadata``)
    name: str  #: the private name, as written in the library
    used_for: str  #: what seeder does with it (module and purpose)
    checked: str  #: versions of ``library`` it was checked on
    if_changed: str  #: ``"raises"``, or what seeder does instead after a SeederWarning
    check: Callable[[Any], Optional[str]]
    per_object: bool = (
        False  #: the check depends on ``obj``: it runs at every use (each is an attribute test)
    )


def _dataloader_calls_get_iterator(_: Any) -> Optional[str]:
    from torch.utils.data import DataLoader

    if callable(getattr(DataLoader, "_get_iterator", None)) and references(
        DataLoader, "_get_iterator"
    ):
        return None
    return "DataLoader.__iter__ no longer calls DataLoader._get_iterator"


def _iterators_read_dataset(_: Any) -> Optional[str]:
    from torch.utils.data import DataLoader, dataloader

    base = getattr(dataloader, "_BaseDataLoaderIter", None)
    if base is None or not references(base, "dataset"):
        return (
            "torch's DataLoader iterators (_BaseDataLoaderIter.__init__) no longer read "
            "loader.dataset"
        )
    if not references(DataLoader, "_DataLoader__initialized"):
        return "DataLoader.__setattr__ no longer guards dataset the way seeder.DataLoader expects"
    return None


def _privateuse1(_: Any) -> Optional[str]:
    import torch

    if callable(getattr(torch._C, "_get_privateuse1_backend_name", None)):
        return None
    return "torch._C._get_privateuse1_backend_name is gone"


def _numpy_global(_: Any) -> Optional[str]:
    import numpy as np

    rs = getattr(np.random.mtrand, "_rand", None)
    if not isinstance(rs, np.random.RandomState):
        return f"numpy.random.mtrand._rand is {type(rs).__name__}, not the global RandomState"
    # NumPy's stub types get_state() as a dict; an MT19937 RandomState returns the legacy tuple
    mine = cast("tuple[Any, ...]", rs.get_state())
    public = cast("tuple[Any, ...]", np.random.get_state())
    if mine[2:] != public[2:] or not np.array_equal(mine[1], public[1]):
        return "numpy.random.mtrand._rand is not the RandomState behind numpy.random.get_state()"
    return None


def _has(attr: str) -> Callable[[Any], Optional[str]]:
    def check(obj: Any) -> Optional[str]:
        return None if hasattr(obj, attr) else f"{type(obj).__name__} has no attribute {attr}"

    return check


def _str_fingerprint(dataset: Any) -> Optional[str]:
    if isinstance(getattr(dataset, "_fingerprint", None), str):
        return None
    return "Dataset._fingerprint is no longer a str"


def _mixin_reads_drop_last(_: Any) -> Optional[str]:
    from accelerate.data_loader import DataLoaderStateMixin

    if references(DataLoaderStateMixin, "_drop_last"):
        return None
    return "DataLoaderStateMixin no longer reads _drop_last"


def _prepare_keeps_prepared(_: Any) -> Optional[str]:
    from accelerate import Accelerator

    code = Accelerator.prepare_data_loader.__code__
    if "_is_accelerate_prepared" in code.co_names + code.co_consts:
        return None
    return "Accelerator.prepare_data_loader no longer reads _is_accelerate_prepared"


def _trainer_skips(_: Any) -> Optional[str]:
    import transformers.trainer as trainer

    if not callable(getattr(trainer, "skip_first_batches", None)):
        return "transformers.trainer has no skip_first_batches"
    if not references(trainer.Trainer, "skip_first_batches"):
        return "no method of Trainer calls skip_first_batches"
    return None


def _trainer_loads_rngs(_: Any) -> Optional[str]:
    from transformers import Trainer

    if not callable(getattr(Trainer, "_load_rng_state", None)):
        return "Trainer has no _load_rng_state"
    if not references(Trainer, "_load_rng_state"):
        return "no method of Trainer calls _load_rng_state"
    return None


def _fit_loop_loaders(checkpoint: Any) -> Optional[str]:
    from lightning.pytorch.loops.fit_loop import _FitLoop

    if "combined_loader" not in _FitLoop.on_load_checkpoint.__code__.co_consts:
        return "_FitLoop.on_load_checkpoint no longer reads 'combined_loader'"
    loops = checkpoint.get("loops") if isinstance(checkpoint, dict) else None
    fit = loops.get("fit_loop") if isinstance(loops, dict) else None
    state = fit.get("state_dict") if isinstance(fit, dict) else None
    if isinstance(state, dict) and isinstance(state.get("combined_loader", []), list):
        return None
    return "the checkpoint has no list at ['loops']['fit_loop']['state_dict']['combined_loader']"


def _cpu_generator_layout(_: Any) -> Optional[str]:
    import torch

    g = torch.Generator()
    g.manual_seed(12345)
    raw = g.get_state()
    if raw.numel() != 5056:
        return f"a CPU generator state has {raw.numel()} bytes, not 5056"
    b = bytes(raw.tolist())
    head = (
        int.from_bytes(b[0:8], "little"),
        int.from_bytes(b[12:16], "little"),
        int.from_bytes(b[24:32], "little"),
    )
    if head != (12345, 1, 12345):
        return (
            "the_initial_seed, seeded and the first Mersenne-Twister word are no longer where "
            "CPUGeneratorImplState had them"
        )
    # leaves the pair's second normal sample cached
    torch.randn(1, dtype=torch.float64, generator=g)
    b = bytes(g.get_state().tolist())
    if int.from_bytes(b[5040:5044], "little") != 1:
        return "normal_is_valid is no longer at byte 5040 of the CPU generator state"
    return None


def _dispatch_mode(_: Any) -> Optional[str]:
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return "torch.utils._python_dispatch.TorchDispatchMode is gone"
    if hasattr(TorchDispatchMode, "__torch_dispatch__"):
        return None
    return "TorchDispatchMode has no __torch_dispatch__"


def _autograd_node(_: Any) -> Optional[str]:
    import torch

    fn = getattr(torch._C, "_current_autograd_node", None)
    return None if callable(fn) and fn() is None else "torch._C._current_autograd_node is gone"


def _op_schema(_: Any) -> Optional[str]:
    import torch

    schema = getattr(torch.ops.aten.normal_.default, "_schema", None)
    if schema is None or schema.name != "aten::normal_":
        return "OpOverload._schema.name no longer names the operator"
    if not any("Generator" in str(a.type) for a in schema.arguments):
        return "OpOverload._schema.arguments no longer shows aten::normal_'s generator"
    return None


_TORCH, _NUMPY, _DALI = "torch 2.13.0", "numpy 2.4.6 (CPython 3.11)", "nvidia-dali 2.4.0"
INTERNALS: dict[str, Internal] = {
    f"{i.library}:{i.name}": i
    for i in (
        Internal(
            "torch",
            "DataLoader._get_iterator",
            "seeder.DataLoader overrides it to hand torch's iterators the "
            "seeding view of the dataset",
            _TORCH,
            "raises",
            _dataloader_calls_get_iterator,
        ),
        Internal(
            "torch",
            "DataLoader.dataset",
            "seeder.DataLoader swaps it (past DataLoader.__setattr__'s guard) for the "
            "seeding view while _BaseDataLoaderIter.__init__ reads it",
            _TORCH,
            "raises",
            _iterators_read_dataset,
        ),
        Internal(
            "torch",
            "_C._get_privateuse1_backend_name",
            "seeder._seeding.rngs_torch finds a custom accelerator backend to seed",
            _TORCH,
            "custom (privateuse1) accelerator backends are not seeded",
            _privateuse1,
        ),
        Internal(
            "torch",
            "CPUGeneratorImplState",
            "seeder._seeding.rngs_torch reads a CPU generator state's fields to refuse "
            "contents torch accepts but no generator reaches (all-zero key, NaN cached normal); "
            "under seeder verify, seeder._run.draws reads its Mersenne-Twister words and position "
            "to count draws per step",
            _TORCH,
            "torch's own set_state check only (is_valid), on a spare generator; no draw counts "
            "of torch's generator",
            _cpu_generator_layout,
        ),
        Internal(
            "torch",
            "utils._python_dispatch.TorchDispatchMode",
            "seeder._run.record: seeder locate's localisation runs fingerprint every tensor "
            "operation",
            _TORCH,
            "raises",
            _dispatch_mode,
        ),
        Internal(
            "torch",
            "_C._current_autograd_node",
            "seeder._run.record: the autograd node a backward operation belongs to, for its "
            "module and line",
            _TORCH,
            "backward operations are named without their module",
            _autograd_node,
        ),
        Internal(
            "torch",
            "OpOverload._schema",
            "seeder._run.record: an operator's name and whether it takes a Generator (draws "
            "random numbers)",
            _TORCH,
            "raises",
            _op_schema,
        ),
        Internal(
            "numpy",
            "random.mtrand._rand",
            "seeder._seeding.rngs: the global RandomState object (its "
            "public seed/get_state/set_state)",
            _NUMPY,
            "raises",
            _numpy_global,
        ),
        Internal(
            "nvidia-dali",
            "Pipeline._enable_checkpointing",
            "seeder.data._dali_state: whether a pipeline saves checkpoints (no public accessor)",
            _DALI,
            "raises",
            _has("_enable_checkpointing"),
            per_object=True,
        ),
        Internal(
            "nvidia-dali",
            "Pipeline._checkpoint",
            "seeder.data.dali: which checkpoint a pipeline was built from",
            _DALI,
            "the check that the pipeline was built from the loaded checkpoint is skipped",
            _has("_checkpoint"),
            per_object=True,
        ),
        Internal(
            "nvidia-dali",
            "_DaliBaseIterator._pipes",
            "seeder.data._dali_state: how many pipelines a DALI iterator drives",
            _DALI,
            "raises",
            _has("_pipes"),
            per_object=True,
        ),
        Internal(
            "accelerate",
            "DataLoaderStateMixin._drop_last",
            "seeder.integrations.accelerate: set on PreparedLoader "
            "for DataLoaderStateMixin.begin, which reads it inside suppress(Exception)",
            "accelerate 1.15.0",
            "raises",
            _mixin_reads_drop_last,
        ),
        Internal(
            "accelerate",
            "Accelerator.prepare_data_loader._is_accelerate_prepared",
            "seeder.data: set on seeder's loaders, so that a plain Accelerator.prepare keeps them "
            "as they are (checked when a loader rebuilt around a seeder batch sampler iterates it)",
            "accelerate 1.15.0",
            "raises",
            _prepare_keeps_prepared,
        ),
        Internal(
            "transformers",
            "trainer.skip_first_batches",
            "seeder.integrations.transformers: replaced while "
            "SeederTrainer trains, so that the resumed loader is not skipped a second time",
            "transformers 5.23.0",
            "raises",
            _trainer_skips,
        ),
        Internal(
            "transformers",
            "Trainer._load_rng_state",
            "seeder.integrations.transformers: SeederTrainer overrides "
            "it so that the RNG states the seeder state set win over the Trainer's "
            "rng_state_<rank>.pth",
            "transformers 5.24.0",
            "raises",
            _trainer_loads_rngs,
        ),
        Internal(
            "datasets",
            "Dataset._fingerprint",
            "seeder.data._provenance: a Hugging Face dataset's hash of its content and "
            "transforms, the fingerprint in a loader's state that refuses another dataset's state",
            "datasets 5.2.0",
            "the dataset is told apart by its class and length only",
            _str_fingerprint,
            per_object=True,
        ),
        Internal(
            "lightning",
            "checkpoint loops.fit_loop.state_dict.combined_loader",
            "seeder.integrations.lightning "
            "drops finished loader positions from Lightning's loop state",
            "lightning 2.6.6",
            "raises",
            _fit_loop_loaders,
            per_object=True,
        ),
    )
}

_ok: set[str] = set()
_warned: set[str] = set()


class DependencyChanged(RuntimeError):
    """A library changed a private name that seeder relies on; the message names the library,
    version and name."""


def library_version(library: str) -> str:
    """The installed version of ``library`` (a distribution name, or ``"python"``: the interpreter),
    or ``"not installed"``.

    >>> library_version("numpy") != "not installed", library_version("python")[0]
    (True, '3')
    """
    if library == "python":
        return platform.python_version()
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _message(key: str, detail: str) -> str:
    item = INTERNALS[key]
    return (
        f"{item.library} {library_version(item.library)} changed: {detail}. seeder relies on the "
        f"private {item.library} name {item.name!r} ({item.used_for}; checked on {item.checked}); "
        f"update seeder or use a {item.library} version it was checked on"
    )


def require(key: str, obj: Any = None) -> bool:
    """Run the check of ``INTERNALS[key]`` (once, unless it depends on ``obj``); on a change, raise
    or warn.

    An entry that ``"raises"`` raises :class:`DependencyChanged`; any other warns once with
    :func:`degrade` and returns ``False`` so that the caller takes its public path. ``True``: all is
    as checked.
    """
    if key in _ok:
        return True
    item = INTERNALS[key]
    problem = item.check(obj)
    if problem is None:
        if not item.per_object:
            _ok.add(key)
        return True
    if item.if_changed == "raises":
        raise DependencyChanged(_message(key, problem))
    degrade(key, problem)
    return False


def degrade(key: str, detail: str) -> None:
    """Warn once (:class:`seeder.SeederWarning`) that ``key`` changed, naming the library, its
    version and the public path seeder takes instead."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(
        f"{_message(key, detail)}; meanwhile: {INTERNALS[key].if_changed}",
        SeederWarning,
        stacklevel=3,
    )


def references(cls: type, name: str) -> bool:
    """Whether some function defined on ``cls`` (not inherited) uses the global or attribute
    ``name``.

    How seeder checks that a library still calls what seeder replaces or provides.

    >>> class A:
    ...     def f(self): return self.x
    >>> references(A, "x"), references(A, "y")
    (True, False)
    """
    for value in vars(cls).values():
        code = getattr(value, "__code__", None)
        if code is not None and name in code.co_names:
            return True
    return False
