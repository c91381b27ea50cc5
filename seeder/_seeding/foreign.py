"""Seeding calls after ``seeder.init``: frameworks' run-level seeding routed, the rest as they say.

Once the module-level seeder (``seeder.init``) has started a run, a later ``random.seed``,
``np.random.seed``, ``torch.manual_seed``, ``torch.seed`` or ``torch.cuda.manual_seed(_all)`` is
told apart by who made it (through the module's name; a name bound before ``init`` is not seen,
and ``init`` warns about it once per name of the user's modules). A method of torch's generator
object itself (``torch.default_generator.manual_seed(5)``, ``.seed()``) cannot be watched when it
is called: :func:`check_torch_seed` finds it at the next ``reseed`` or ``state_dict`` from
``torch.initial_seed()``, and warns once per run:

* **a framework's run-level seeding** (Lightning's ``seed_everything`` and ``reset_seed``, which
  ``LightningCLI`` and ddp call; transformers' ``set_seed`` and ``enable_full_determinism``,
  which ``Trainer(args)`` calls with ``TrainingArguments.seed``; accelerate's ``set_seed``) is
  *routed*: the RNG it names is seeded with seeder's seed for the current ``(task, epoch)`` (the
  rank-independent stream, as those functions seed every rank alike), so the run stays a
  function of the master seed. One :class:`seeder.SeederWarning` per framework call and line
  says so and names the fix (a log line instead when the framework passed the master seed, or
  inside :func:`expected`);
* **local seeding** (a dataset seeding from its index while a loader fetches, in the main
  process as in DataLoader workers; anything seeder's loaders call, as they put the loop's RNGs
  back; an installed library; a block of ``torch.random.fork_rng`` or ``seeder.fork_rng``) does
  what it says, silently: it gets the numbers it gets without seeder, whatever ``num_workers``
  is. A sampler or a ``collate_fn`` of torch's loader in the main process is not local: it
  seeds the training loop's RNG;
* **a call in the user's own code** (a file outside the installed packages) does what it says,
  and one :class:`seeder.SeederWarning` per line names that line: what draws from that RNG next
  depends on the seed it passed, not on the master seed (none when it passed the master seed).

seeder's and torch's own calls, and every call in a DataLoader worker, pass through untouched.
A framework's call seeds first as it says (a seed its library refuses raises, as without
seeder), then is routed. ``SEEDER_FOREIGN_SEEDING=allow`` lets the frameworks' calls seed as they
say too, with no warning (any other non-empty value is an error). :func:`global_draws` tells
which global RNGs were drawn from before ``seeder.init``
(``seeder verify`` reports it: data prepared from an unseeded RNG differs between runs).

Example:
    >>> import random, warnings, torch, seeder
    >>> seeder.init(master_seed=7); seeder.reseed(0, 0)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     g = torch.manual_seed(123)           # your own call: seeds as it says, and warns
    >>> round(float(torch.rand(1)), 4), "depends on 123" in str(caught[0].message)
    (0.2961, True)
    >>> seeder.default_seeder().reset()
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import site
import sys
import sysconfig
import warnings
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from seeder._checks import is_int
from seeder._errors import SeederWarning
from seeder._seeding import bound
from seeder._seeding.rngs_torch import note_default_seed, noted_default_seed

if TYPE_CHECKING:
    from seeder._seeding.rngbase import RNGAdapter

__all__ = [
    "Routes",
    "ENV_FOREIGN",
    "watch",
    "expected",
    "global_draws",
    "init_site",
    "routed_calls",
    "restored",
    "check_environment",
    "check_torch_seed",
    "ROUTED_KEPT",
]

logger = logging.getLogger("seeder")

#: Environment variable: ``allow`` lets the frameworks' seeding calls seed as they say (no
#: routing, no warning); unset or empty routes them. Any other value is an error at ``init``.
ENV_FOREIGN = "SEEDER_FOREIGN_SEEDING"
#: How many routed calls :func:`routed_calls` keeps (the latest).
ROUTED_KEPT = 256

#: Packages whose frames are never the user's code, wherever they are installed (editable, say).
_LIBRARIES = (
    "torch",
    "numpy",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
    "transformers",
    "accelerate",
    "jsonargparse",
    "torchdata",
)
#: Frameworks' run-level seeding functions, by code name: the name the messages give each.
_FRAMEWORK_FUNCS = {
    "seed_everything": "seed_everything",
    "reset_seed": "seed_everything",
    "set_seed": "set_seed",
    "enable_full_determinism": "set_seed",
}
_FRAMEWORK_NAMES = {
    "lightning": "Lightning's",
    "lightning_fabric": "Lightning's",
    "pytorch_lightning": "Lightning's",
    "transformers": "transformers'",
    "accelerate": "accelerate's",
}
#: What each primitive seeds, in words, and a generator of one's own seeded alike.
_WHAT = {
    "python": ("Python's random", "random.Random({seed})"),
    "numpy": ("NumPy's global RNG", "np.random.default_rng({seed})"),
    "torch": (
        "torch's CPU generator and the accelerators",
        "torch.Generator().manual_seed({seed})",
    ),
    "accelerator": ("the accelerators' generators", "torch.Generator(device).manual_seed({seed})"),
}
#: Adapters a torch / accelerator seeding does not touch.
_NOT_TORCH = {
    "torch": {"python", "numpy", "numpy_generator"},
    "accelerator": {"python", "numpy", "numpy_generator", "torch"},
}

_OWN_CALLERS: tuple[str, ...] = ()  # seeder's and torch's directories: their calls pass through
#: torch's own wrappers around a seeding function (``torch._dynamo`` wraps ``torch.manual_seed``
#: with ``torch._disable_dynamo`` when it is imported): skipped when looking for the caller.
_TORCH_WRAPPERS: tuple[str, ...] = ()
#: Directories of the loaders that fetch samples (torch's, torchdata's, seeder's): a seeding below
#: one of their frames runs while a sample is fetched, as it does in a DataLoader worker, so it is
#: local seeding.
_DATA_DIRS: tuple[str, ...] = ()
#: seeder's loaders' directory.
_SEEDER_DATA = "<none>"
#: Where installed packages and the standard library live: frames there are not the user's code.
_INSTALLED: tuple[str, ...] = ()
_owner: Optional[weakref.ReferenceType[Any]] = None
_installed = False
_quiet = 0
_sites: set[tuple[str, str]] = set()
_routed: deque[dict[str, Any]] = deque(maxlen=ROUTED_KEPT)
#: Families whose global RNGs a block puts back (``torch.random.fork_rng``, ``seeder.fork_rng``):
#: a seeding call there is not the run's, so not warned about.
_restoring: dict[str, int] = {}
_init_site: Optional[str] = None
#: Whether this run (since the last ``init``) was warned of a reseed of torch's default generator
#: that no watched call made.
_unseen_warned = False


class Routes(Protocol):
    """What watching and routing seeding calls reads of the seeder that owns the global RNGs."""

    @property
    def initialized(self) -> bool: ...

    @property
    def rank(self) -> int: ...

    @property
    def last_reseed(self) -> Optional[tuple[int, int]]: ...

    def get_master_seed(self) -> int: ...

    def get_seed(
        self, task_id: int, epoch: int = 0, *, shared: bool = False, stream: int = 0
    ) -> int: ...

    def global_adapters(self) -> list[RNGAdapter]: ...


def _module(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", "")).split(".")[0]


def _active() -> Optional[Any]:
    """The seeder that owns the global RNGs, or ``None`` (not started, or a DataLoader worker)."""
    owner = _owner() if _owner is not None else None
    if owner is None or not owner.initialized:
        return None
    import torch.utils.data

    if torch.utils.data.get_worker_info() is not None:  # workers are seeded by their loader
        return None
    return owner


def _is_user(frame: Any) -> bool:  # the user's own code: a file outside the installed packages
    return not frame.f_code.co_filename.startswith(_INSTALLED)


def _user_frame(frame: Any) -> Optional[Any]:
    """The first frame of the user's own code from ``frame`` outwards, or ``None``."""
    f = frame
    while f is not None:
        if _is_user(f):
            return f
        f = f.f_back
    return None


def _code_of(fn: Any) -> Any:
    """The code object a call of ``fn`` runs (through ``functools.partial`` and ``__call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(fn, "__code__", None)
    return code if code is not None else getattr(type(fn).__call__, "__code__", None)


def _is_fetch(loader: Any, frame: Any) -> bool:
    """Whether ``frame``, called by the loader's frame ``loader``, fetches a sample: a dataset's
    ``__getitem__`` / ``__getitems__`` or method, or what a fetcher runs other than its
    ``collate_fn`` (the generator an ``IterableDataset`` returned); not a sampler's
    ``__iter__`` or a ``collate_fn``."""
    from torch.utils.data import Dataset, Sampler

    if frame.f_code.co_name in ("__getitem__", "__getitems__"):
        return True
    owner = frame.f_locals.get("self")
    if isinstance(owner, Sampler):
        return False
    if isinstance(owner, Dataset):
        return True
    fetcher = loader.f_locals.get("self")  # a fetcher holds the dataset and the collate_fn
    collate = getattr(fetcher, "collate_fn", None)
    if getattr(fetcher, "dataset", None) is None or collate is None:
        return False
    return frame.f_code is not _code_of(collate)


def _kept_by_loader(frame: Any) -> bool:
    """Whether one of seeder's loaders runs ``frame``'s call: they put the training loop's RNGs
    back after each fetch, ``collate_fn`` included."""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith(_SEEDER_DATA):
            return True
        f = f.f_back
    return False


def _classify(caller: Any) -> tuple[str, Any]:
    """``("local" | "framework" | "user" | "library", frame)`` for a seeding call by ``caller``.

    ``frame`` is the framework's seeding function for ``"framework"``, else ``caller``. A call
    below a loader's sample fetch is local whoever made it (it runs in a worker when
    ``num_workers > 0``); a sampler's or a ``collate_fn``'s call in the main process is not (it
    is the caller's, user or library); a library's call below a framework's seeding function is
    that framework's run-level seeding.
    """
    user = _is_user(caller)
    f, inner = caller, None
    while f is not None:
        if f.f_code.co_filename.startswith(_DATA_DIRS):
            if inner is None or _is_fetch(f, inner) or _kept_by_loader(f):
                return "local", caller
            break  # a sampler or a collate_fn the loader called: the caller's own seeding
        if not user and f.f_code.co_name in _FRAMEWORK_FUNCS and _module(f) in _FRAMEWORK_NAMES:
            return "framework", f
        f, inner = f.f_back, f
    return ("user" if user else "library"), caller


def _framework_call(frame: Any) -> tuple[bool, bool]:
    """``(called by LightningCLI, called by a transformers Trainer)``, from the stack above."""
    cli, trainer = False, False
    f = frame
    while f is not None:
        mod, code = _module(f), f.f_code.co_name
        if code == "_set_seed" and mod in _FRAMEWORK_NAMES and "cli" in f.f_globals["__name__"]:
            cli = True
        if code in ("__init__", "train") and mod == "transformers":
            trainer = trainer or "Trainer" in type(f.f_locals.get("self")).__name__
        f = f.f_back
    return cli, trainer


def _fix(name: str, cli: bool, trainer: bool) -> str:
    give = "give the seed to seeder instead (seeder.init(master_seed=...), --seed, or SEEDER_SEED)"
    if cli:
        return (
            "pass seed_everything_default=False to LightningCLI (or seed_everything: false "
            f"in its config) and {give}"
        )
    if trainer:
        return (
            "use seeder.integrations.transformers.SeederTrainer, or TrainingArguments("
            "seed=<the master seed>) so that the Trainer's set_seed agrees with seeder"
        )
    return f"remove the {name} call (seeder.reseed seeds random, NumPy and torch) and {give}"


def _route(seeder: Routes, family: str, seed_arg: Any, func: Any) -> None:
    """Seed ``family``'s global RNGs from the master seed instead of ``seed_arg``; say so once
    per framework call and line."""
    key = seeder.last_reseed or (0, 0)
    seed = seeder.get_seed(key[0], key[1], shared=True)
    for adapter in seeder.global_adapters():
        if adapter.name == family or adapter.name not in _NOT_TORCH.get(family, (adapter.name,)):
            adapter.seed(seed)
    name = _FRAMEWORK_FUNCS[func.f_code.co_name]
    call = f"{_FRAMEWORK_NAMES[_module(func)]} {name}({seed_arg!r})"
    user = _user_frame(func)
    site = f"{user.f_code.co_filename}:{user.f_lineno}" if user is not None else None
    master = seeder.get_master_seed()
    _routed.append({"call": call, "site": site, "rng": family, "master_seed": master})
    if (str(site), call) in _sites:
        return
    _sites.add((str(site), call))
    where = f"{call}, reached from {site}," if site else f"{call}, called by the framework itself,"
    text = (
        f"{where} seeds the global RNGs after seeder.init; seeder routed it: they follow "
        f"master seed {master}"
    )
    if _quiet or (is_int(seed_arg) and seed_arg == master):
        logger.info("%s (%s)", text, "expected" if _quiet else "the same seed")
        return
    cli, trainer = _framework_call(func)
    shown = user if user is not None else func  # the user's line, else the framework's own
    warnings.warn_explicit(
        f"{text}, not {seed_arg!r}, so that the run is a function of the master "
        f"seed and resumes exactly. To silence this: {_fix(name, cli, trainer)}",
        SeederWarning,
        shown.f_code.co_filename,
        shown.f_lineno,
    )


def _kept(seeder: Routes, family: str, primitive: str, seed_arg: Any, caller: Any) -> None:
    """The user's own seeding call, which did what it says: warned once per line (logged when it
    passed the master seed)."""
    site = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    if (site, primitive) in _sites:
        return
    _sites.add((site, primitive))
    master = seeder.get_master_seed()
    what, own = _WHAT[family]
    shown = "" if seed_arg is None else repr(seed_arg)
    if _quiet or (is_int(seed_arg) and seed_arg == master):
        logger.info("%s(%s) at %s seeds %s after seeder.init", primitive, shown, site, what)
        return
    if seed_arg is None:  # random.seed(), torch.seed(): a seed from OS entropy
        depends = "a seed drawn from OS entropy, another in every run"
        own = own.format(seed="seeder.get_seed(task, epoch, stream=...)")
    else:
        depends = repr(seed_arg)
        own = own.format(seed=repr(seed_arg))
    warnings.warn_explicit(
        f"{primitive}({shown}) at {site} seeds {what} after seeder.init, so what draws from "
        f"them next depends on {depends}, not on master seed {master}. To leave the run to "
        f"seeder, remove the call (seeder.reseed seeds random, NumPy and torch); for draws of "
        f"your own, seed a generator of your own ({own}) "
        f"(see docs/quickstart.md#seeding-calls-after-init)",
        SeederWarning,
        caller.f_code.co_filename,
        caller.f_lineno,
    )


def _wrap(
    original: Callable[..., Any], family: str, primitive: str, returns: Callable[[], Any]
) -> Callable[..., Any]:
    def seeding(*args: Any, **kwargs: Any) -> Any:
        try:
            return _seeding(*args, **kwargs)
        finally:
            if family == "torch":  # a call seeder saw: the generator's seed is a known one
                note_default_seed()

    def _seeding(*args: Any, **kwargs: Any) -> Any:
        seeder = _active()
        if seeder is None:
            return original(*args, **kwargs)
        caller = sys._getframe(2)
        while caller.f_back is not None and caller.f_code.co_filename.startswith(_TORCH_WRAPPERS):
            caller = caller.f_back
        if caller.f_code.co_filename.startswith(_OWN_CALLERS):
            return original(*args, **kwargs)
        kind, frame = _classify(caller)
        seed_arg = args[0] if args else next(iter(kwargs.values()), None)
        allow = check_environment()
        result = original(*args, **kwargs)  # a bad seed raises here, as without seeder
        if kind == "framework" and not allow:
            _route(seeder, family, seed_arg, frame)
            return returns()
        if kind == "user" and not allow and not _restoring.get(family):
            _kept(seeder, family, primitive, seed_arg, caller)
        return result

    # attributes of a function, which mypy does not know
    seeding.__wrapped__ = original  # type: ignore[attr-defined]
    seeding.seeder_routes = True  # type: ignore[attr-defined]
    seeding.__doc__ = original.__doc__
    seeding.__name__ = getattr(original, "__name__", primitive)
    return seeding


def _routes(fn: Any) -> bool:
    """Whether ``fn`` is (or wraps, as torch's ``_disable_dynamo`` does) a wrapper of seeder's."""
    while fn is not None:
        if getattr(fn, "seeder_routes", False):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _dirs() -> None:
    """Compute the directories the classification reads (once, at the first ``watch``)."""
    global _OWN_CALLERS, _TORCH_WRAPPERS, _DATA_DIRS, _INSTALLED, _SEEDER_DATA
    import importlib.util

    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    # the seeder package
    own_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    _OWN_CALLERS = (own_dir, torch_dir)
    _TORCH_WRAPPERS = (
        os.path.join(torch_dir, "_compile.py"),
        os.path.join(torch_dir, "_dynamo", ""),
    )
    _SEEDER_DATA = os.path.join(own_dir, "data", "")
    data = [os.path.join(torch_dir, "utils", "data", ""), _SEEDER_DATA]
    paths = sysconfig.get_paths()
    installed = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    installed.update(getattr(site, "getsitepackages", lambda: [])())
    installed.add(getattr(site, "getusersitepackages", lambda: None)())
    for name in _LIBRARIES:
        try:  # a top-level package's spec: found without importing it
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if found is not None and found.submodule_search_locations:
            installed.update(found.submodule_search_locations)
            if name == "torchdata":  # its StatefulDataLoader fetches in its own files
                data += [os.path.join(p, "") for p in found.submodule_search_locations]
    _DATA_DIRS = tuple(data)
    _INSTALLED = (*(os.path.join(p, "") for p in installed if p), own_dir, "<frozen")


def _install() -> None:
    global _installed
    if _installed:
        return
    import random

    import numpy as np
    import torch

    _dirs()
    default = torch.default_generator
    targets: list[tuple[Any, str, str, str, Callable[[], Any]]] = [
        (random, "seed", "python", "random.seed", lambda: None),
        (np.random, "seed", "numpy", "np.random.seed", lambda: None),
        (torch, "manual_seed", "torch", "torch.manual_seed", lambda: default),
        (torch.random, "manual_seed", "torch", "torch.manual_seed", lambda: default),
        (torch.cuda, "manual_seed", "accelerator", "torch.cuda.manual_seed", lambda: None),
        (torch.cuda, "manual_seed_all", "accelerator", "torch.cuda.manual_seed_all", lambda: None),
    ]
    if hasattr(torch.random, "seed"):  # seeds from OS entropy: not a function of the master seed
        targets += [
            (torch, "seed", "torch", "torch.seed", lambda: torch.initial_seed()),
            (torch.random, "seed", "torch", "torch.random.seed", lambda: torch.initial_seed()),
        ]
    for module, attr, family, primitive, returns in targets:
        original = getattr(module, attr, None)
        if original is not None and not _routes(original):
            setattr(module, attr, _wrap(original, family, primitive, returns))
            bound.UNWATCHED.setdefault(id(original), (original, primitive))
    fork = getattr(torch.random, "fork_rng", None)
    if fork is not None and not _routes(fork):
        torch.random.fork_rng = _forking(fork)
    _installed = True


def _forking(original: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.random.fork_rng`` that marks its block: torch's generators are put back after it,
    so a seeding call inside is not warned about."""

    @contextlib.contextmanager
    def fork_rng(*args: Any, **kwargs: Any) -> Iterator[Any]:
        enabled = kwargs.get("enabled", args[1] if len(args) > 1 else True)
        with original(*args, **kwargs) as value:
            if not enabled:  # nothing is put back: the calls inside are the run's
                yield value
                return
            with restored(("torch", "accelerator")):
                yield value

    functools.update_wrapper(fork_rng, original)
    fork_rng.seeder_routes = True  # type: ignore[attr-defined]
    return fork_rng


@contextlib.contextmanager
def restored(families: Iterable[str]) -> Iterator[None]:
    """A block after which the global RNGs of ``families`` (``"python"``, ``"numpy"``,
    ``"torch"``, ``"accelerator"``) are put back: the user's seeding calls inside are not the
    run's, and are not warned about.

    >>> with restored(("torch",)):
    ...     pass
    """
    names = list(families)
    noted = noted_default_seed()  # the block puts torch's generator back, its seed included
    for name in names:
        _restoring[name] = _restoring.get(name, 0) + 1
    try:
        yield
    finally:
        for name in names:
            _restoring[name] -= 1
        if "torch" in names:
            note_default_seed(noted)


def check_environment() -> bool:
    """Whether ``$SEEDER_FOREIGN_SEEDING`` lets the frameworks' calls seed as they say.

    Returns:
        ``True`` for ``allow`` (any case), ``False`` when unset or empty.

    Raises:
        ValueError: any other value (``yes``, ``1``, `` allow``): it names the valid ones.

    >>> check_environment() in (True, False)
    True
    """
    value = os.environ.get(ENV_FOREIGN, "")
    if value == "" or value.lower() == "allow":
        return value != ""
    raise ValueError(
        f"${ENV_FOREIGN}={value!r} is not a valid value: set it to 'allow' (frameworks' "
        f"seeding calls seed as they say, with no warning), or unset it (they are routed through "
        f"seeder)"
    )


def watch(seeder: Routes) -> None:
    """Watch later seeding calls for ``seeder``, the module-level seeder (its ``init`` calls this).

    >>> import seeder
    >>> watch(seeder.default_seeder())
    """
    global _owner, _init_site
    global _unseen_warned
    _install()
    _owner = weakref.ref(seeder)
    _sites.clear()
    _unseen_warned = False
    note_default_seed()
    bound.warn_bound_names(_INSTALLED)
    user = _user_frame(sys._getframe(1))
    _init_site = f"{user.f_code.co_filename}:{user.f_lineno}" if user is not None else None
    drawn = sorted(name for name, used in global_draws().items() if used)
    if drawn:
        logger.info(
            "%s drawn from before seeder.init at %s: what it made differs between runs",
            drawn,
            _init_site,
        )


def check_torch_seed(seeder: Routes, moment: str) -> None:
    """At a moment ``seeder`` looks (a reseed, a state taken): warn once per run if torch's default
    generator was reseeded by a call seeder cannot watch.

    ``torch.default_generator.manual_seed(n)`` and ``.seed()`` are methods of a C object: no
    wrapper sees them. They change ``torch.initial_seed()``, which is compared with the seed
    seeder left (its own seeding and restores, and the seeding calls it watches, update it;
    ``set_rng_state`` puts the seed back with the state, so a restore is no reseed).

    Args:
        seeder: the seeder that looks; only the module-level one that ``init`` started checks.
        moment: what it is doing, for the message (``"seeder.reseed(1, 0)"``).

    Example:
        >>> import torch, warnings, seeder
        >>> seeder.init(master_seed=7); seeder.reseed(0, 0)
        >>> _ = torch.default_generator.manual_seed(5)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     check_torch_seed(seeder.default_seeder(), "seeder.reseed(1, 0)")
        >>> "torch.default_generator.manual_seed(5)" in str(caught[0].message)
        True
        >>> seeder.default_seeder().reset()
    """
    global _unseen_warned
    if _active() is not seeder or _restoring.get("torch"):
        return
    import torch

    noted, now = noted_default_seed(), torch.initial_seed()
    if noted is None or now == noted:
        return
    note_default_seed(now)
    user = _user_frame(sys._getframe(1))
    site = f" ({user.f_code.co_filename}:{user.f_lineno})" if user is not None else ""
    calls = [f"torch.default_generator.manual_seed({now})", "torch.default_generator.seed()"]
    if now >= 2**32:  # .seed() draws 64 bits
        calls.reverse()
    text = (
        f"torch's default generator was reseeded by {calls[0]} (or {calls[1]}), a call seeder "
        f"cannot see, which set its initial seed to {now}; found at {moment}{site}"
    )
    if _unseen_warned or _quiet or check_environment():
        logger.info("%s", text)
        return
    _unseen_warned = True
    warnings.warn_explicit(
        f"{text}. What draws from torch next depends on seed {now}, not on master seed "
        f"{seeder.get_master_seed()}: remove the call, or seed a generator of your own "
        f"(torch.Generator().manual_seed({now}))",
        SeederWarning,
        user.f_code.co_filename if user is not None else "<seeder>",
        user.f_lineno if user is not None else 0,
    )


@contextlib.contextmanager
def expected(reason: str) -> Iterator[None]:
    """A block whose seeding calls are expected (an integration's framework seeds): logged, not
    warned.

    >>> with expected("test"):
    ...     pass
    """
    global _quiet
    _quiet += 1
    try:
        logger.debug("foreign seeding expected: %s", reason)
        yield
    finally:
        _quiet -= 1


def routed_calls() -> list[dict[str, Any]]:
    """The frameworks' seeding calls routed in this process, the latest :data:`ROUTED_KEPT`
    (256) of them, oldest first: ``call``, ``site`` (``None`` when no line of the user's led to
    it), ``rng``, ``master_seed``.

    >>> isinstance(routed_calls(), list)
    True
    """
    return list(_routed)


def init_site() -> Optional[str]:
    """``file:line`` of the last ``seeder.init`` of the module-level seeder, or ``None``.

    >>> init_site() is None or ":" in init_site()
    True
    """
    return _init_site


def global_draws() -> dict[str, bool]:
    """Which global RNGs were drawn from since they were last seeded (or since the process
    started), where that shows.

    NumPy's global Mersenne Twister stands at position 624 right after ``np.random.seed``
    and 623 after its seeding from OS entropy at import; any other position means draws.
    Python's ``random`` and torch's generator are used by libraries at import, so their
    state tells nothing and they are not reported. Read-only.

    >>> sorted(global_draws())
    ['numpy']
    """
    from seeder._seeding.rngs import mt_state  # lazy: NumPy only when asked

    return {"numpy": int(mt_state()[2]) not in (623, 624)}
