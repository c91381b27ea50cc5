"""Foreign seeding: after ``seeder.init``, every later seeding of a global RNG goes through seeder.

Once the module-level seeder (``seeder.init``) has started a run, seeder owns Python's
``random``, NumPy's global RNG, torch's CPU generator and the accelerators. A later
``random.seed``, ``np.random.seed``, ``torch.manual_seed``, ``torch.cuda.manual_seed(_all)``,
and so every framework seeding built on them (Lightning's ``seed_everything``, which
``LightningCLI`` calls, transformers' and accelerate's ``set_seed``, which
``Trainer(args)`` calls with ``TrainingArguments.seed``), is *routed*: the RNG it names is
seeded with seeder's seed for the current ``(task, epoch)`` (the rank-independent stream,
as those functions seed every rank alike), so the run stays a function of the master seed
and resumes exactly. The call was made with a seed of its own: unless that seed is the
master seed, one :class:`seeder.SeederWarning` per call site names the file and line and
the fix. DataLoader workers, torch's and seeder's own calls pass through untouched.

``SEEDER_FOREIGN_SEEDING=allow`` turns routing off (the calls seed as they say, no
warning). :func:`global_draws` tells which global RNGs were drawn from before
``seeder.init`` (``seeder verify`` reports it: data prepared from an unseeded RNG differs
between runs).

Example:
    >>> import random, warnings, seeder
    >>> seeder.init(master_seed=7); seeder.reseed(0, 0); a = random.random()
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     random.seed(7)                       # the master seed: routed, no warning
    >>> [str(w.message) for w in caught], routed_calls()[-1]["call"]
    ([], 'random.seed(7)')
    >>> seeder.default_seeder().reset()
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import sysconfig
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

from .checks import is_int
from .errors import SeederWarning

__all__ = ["ENV_FOREIGN", "PREINIT_SUFFIX", "watch", "expected", "global_draws", "init_site", "routed_calls"]

logger = logging.getLogger("seeder")

#: Environment variable: ``allow`` lets foreign seeding calls seed as they say (no routing, no warning).
ENV_FOREIGN = "SEEDER_FOREIGN_SEEDING"

#: Suffix (before ``<rank>.json``) of the file, next to ``$SEEDER_TRACE``'s traces, that records draws before ``init``.
PREINIT_SUFFIX = ".preinit.rank"
#: Library packages whose frames are not "the call site" the user is shown.
_LIBRARIES = frozenset({"seeder", "torch", "numpy", "random", "lightning", "lightning_fabric", "pytorch_lightning",
                        "transformers", "accelerate", "jsonargparse", "importlib", "runpy", "functools",
                        "contextlib", "typing", "abc"})
#: Frameworks' seeding functions, by package: their frames name the call in messages.
_FRAMEWORK_FUNCS = {"seed_everything": "seed_everything", "reset_seed": "seed_everything", "set_seed": "set_seed",
                    "enable_full_determinism": "set_seed"}
_FRAMEWORKS = frozenset({"lightning", "lightning_fabric", "pytorch_lightning", "transformers", "accelerate"})
#: Adapters a torch / accelerator seeding does not touch.
_NOT_TORCH = {"torch": {"python", "numpy", "numpy_generator"}, "accelerator": {"python", "numpy", "numpy_generator", "torch"}}
_STDLIB = tuple(p for p in {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib"),
                            sysconfig.get_paths().get("platlib")} if p)

_OWN_CALLERS: Tuple[str, ...] = ()  # seeder's and torch's directories: their calls pass through
#: torch's own wrappers around a seeding function (``torch._dynamo`` wraps ``torch.manual_seed`` with
#: ``torch._disable_dynamo`` when it is imported): skipped when looking for the caller.
_TORCH_WRAPPERS: Tuple[str, ...] = ()
_owner: Optional["weakref.ReferenceType[Any]"] = None
_installed = False
_quiet = 0
_sites: Set[Tuple[str, str]] = set()
_routed: List[Dict[str, Any]] = []
_init_site: Optional[str] = None


def _module(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", "")).split(".")[0]


def _active() -> Optional[Any]:
    """The seeder that owns the global RNGs now, or ``None`` (not started, turned off, or a DataLoader worker)."""
    owner = _owner() if _owner is not None else None
    if owner is None or not owner.initialized or os.environ.get(ENV_FOREIGN, "").lower() == "allow":
        return None
    import torch.utils.data

    if torch.utils.data.get_worker_info() is not None:  # workers are seeded by their loader
        return None
    return owner


def _user_frame(frame: Any) -> Any:
    """The first frame outside the libraries (the line of the user's script that led to the call)."""
    f = frame
    while f is not None:
        if _module(f) not in _LIBRARIES and not f.f_code.co_filename.startswith(_STDLIB):
            return f
        f = f.f_back
    return frame


def _framework_call(frame: Any) -> Tuple[Optional[str], bool, bool]:
    """``(framework function, called by LightningCLI, called by a Trainer)`` found on the stack, outermost first."""
    name, cli, trainer = None, False, False
    f = frame
    while f is not None:
        mod, code = _module(f), f.f_code.co_name
        if mod in _FRAMEWORKS:
            if code in _FRAMEWORK_FUNCS:
                name = _FRAMEWORK_FUNCS[code]
            if code == "_set_seed" and "cli" in str(f.f_globals.get("__name__", "")):
                cli = True
            if code in ("__init__", "train") and mod == "transformers" and "Trainer" in type(f.f_locals.get("self")).__name__:
                trainer = True
        f = f.f_back
    return name, cli, trainer


def _fix(name: Optional[str], cli: bool, trainer: bool, primitive: str) -> str:
    give = "give the seed to seeder instead (seeder.init(master_seed=...), --seed, or SEEDER_SEED)"
    if cli:
        return f"pass seed_everything_default=False to LightningCLI (or seed_everything: false in its config) and {give}"
    if trainer:
        return ("use seeder.integrations.transformers.SeederTrainer, or TrainingArguments(seed=<the master seed>) "
                "so that the Trainer's set_seed agrees with seeder")
    return f"remove the {name or primitive} call (seeder.reseed seeds random, NumPy and torch) and {give}"


def _route(seeder: Any, family: str, primitive: str, seed_arg: Any, frame: Any) -> None:
    key = seeder.last_reseed or (0, 0)
    seed = seeder.get_seed(key[0], key[1], shared=True)
    for adapter in seeder.global_adapters():
        if adapter.name == family or (family in ("torch", "accelerator") and adapter.name not in _NOT_TORCH[family]):
            adapter.seed(seed)
    user = _user_frame(frame)
    site = f"{user.f_code.co_filename}:{user.f_lineno}"
    name, cli, trainer = _framework_call(frame)
    call = f"{name or primitive}({seed_arg!r})"
    event = {"call": call, "site": site, "rng": family, "master_seed": seeder.get_master_seed()}
    _routed.append(event)
    if (site, name or primitive) in _sites:
        return
    _sites.add((site, name or primitive))
    same = is_int(seed_arg) and seed_arg == seeder.get_master_seed()
    text = (f"{call} at {site} seeds the global RNGs after seeder.init; seeder routed it: they follow master seed "
            f"{seeder.get_master_seed()}")
    if _quiet or same:
        logger.info("%s (the same seed)", text) if same else logger.debug(text)
        return
    warnings.warn_explicit(f"{text}, not {seed_arg!r}, so that the run is a function of the master seed and resumes "
                           f"exactly. To silence this: {_fix(name, cli, trainer, primitive)}", SeederWarning,
                           user.f_code.co_filename, user.f_lineno)


def _wrap(original: Callable[..., Any], family: str, primitive: str, returns: Callable[[], Any]) -> Callable[..., Any]:
    def seeding(*args: Any, **kwargs: Any) -> Any:
        seeder = _active()
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_code.co_filename.startswith(_TORCH_WRAPPERS):
            caller = caller.f_back
        if seeder is None or caller.f_code.co_filename.startswith(_OWN_CALLERS):
            return original(*args, **kwargs)
        seed_arg = args[0] if args else next(iter(kwargs.values()), None)
        _route(seeder, family, primitive, seed_arg, caller)
        return returns()

    seeding.__wrapped__ = original  # type: ignore[attr-defined]
    seeding.seeder_routes = True  # type: ignore[attr-defined]
    seeding.__doc__ = original.__doc__
    seeding.__name__ = getattr(original, "__name__", primitive)
    return seeding


def _routes(fn: Any) -> bool:
    """Whether ``fn`` is (or wraps, as torch's ``_disable_dynamo`` does) one of seeder's routing wrappers."""
    while fn is not None:
        if getattr(fn, "seeder_routes", False):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


def _install() -> None:
    global _installed, _OWN_CALLERS, _TORCH_WRAPPERS
    if _installed:
        return
    import random

    import numpy as np
    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    _OWN_CALLERS = (os.path.dirname(os.path.abspath(__file__)) + os.sep, torch_dir)
    _TORCH_WRAPPERS = (os.path.join(torch_dir, "_compile.py"), os.path.join(torch_dir, "_dynamo") + os.sep)

    targets: List[Tuple[Any, str, str, str, Callable[[], Any]]] = [
        (random, "seed", "python", "random.seed", lambda: None),
        (np.random, "seed", "numpy", "np.random.seed", lambda: None),
        (torch, "manual_seed", "torch", "torch.manual_seed", lambda: torch.default_generator),
        (torch.random, "manual_seed", "torch", "torch.manual_seed", lambda: torch.default_generator),
        (torch.cuda, "manual_seed", "accelerator", "torch.cuda.manual_seed", lambda: None),
        (torch.cuda, "manual_seed_all", "accelerator", "torch.cuda.manual_seed_all", lambda: None),
    ]
    for module, attr, family, primitive, returns in targets:
        original = getattr(module, attr, None)
        if original is not None and not _routes(original):
            setattr(module, attr, _wrap(original, family, primitive, returns))
    _installed = True


def watch(seeder: Any) -> None:
    """Route later foreign seeding through ``seeder``, the module-level seeder (its ``init`` calls this).

    >>> import seeder
    >>> watch(seeder.default_seeder())
    """
    global _owner, _init_site
    _install()
    _owner = weakref.ref(seeder)
    _sites.clear()
    user = _user_frame(sys._getframe(1))
    _init_site = f"{user.f_code.co_filename}:{user.f_lineno}"
    drawn = sorted(name for name, used in global_draws().items() if used)
    if drawn:
        logger.info("%s drawn from before seeder.init at %s: what it made differs between runs", drawn, _init_site)
    prefix = os.environ.get("SEEDER_TRACE")
    if prefix:  # seeder verify reads it when a seeded run differs
        from .env.safefile import write_file

        path = f"{prefix}{PREINIT_SUFFIX}{seeder.rank}.json"
        write_file(os.path.dirname(os.path.abspath(path)), os.path.basename(path),
                   json.dumps({"init_site": _init_site, "drawn_before_init": drawn}).encode(), 0o644)


@contextlib.contextmanager
def expected(reason: str) -> Iterator[None]:
    """A block whose foreign seeding is expected (an integration's framework seeds): routed, logged, not warned.

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


def routed_calls() -> List[Dict[str, Any]]:
    """The foreign seeding calls routed in this process: ``call``, ``site``, ``rng``, ``master_seed``.

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


def global_draws() -> Dict[str, bool]:
    """Which global RNGs were drawn from since they were last seeded (or since the process started), where that shows.

    NumPy's global Mersenne Twister stands at position 624 right after ``np.random.seed``
    and 623 after its seeding from OS entropy at import; any other position means draws.
    Python's ``random`` and torch's generator are used by libraries at import, so their
    state tells nothing and they are not reported. Read-only.

    >>> sorted(global_draws())
    ['numpy']
    """
    import numpy as np

    return {"numpy": int(np.random.get_state()[2]) not in (623, 624)}
