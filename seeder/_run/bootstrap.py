"""How the tools install their hooks into the runs they start: one mechanism for all of them.

``seeder verify``, ``seeder compare`` and ``seeder locate`` start every run with
:data:`SITE_DIR` first on ``PYTHONPATH`` (:func:`run_environment`). Python imports the
``sitecustomize`` there when the interpreter starts (each ``torchrun`` rank, each process a
framework launches), and it calls :func:`install`, which adds to the core's hook point
(:mod:`seeder._hooks`) the callbacks the run's environment asks for:

* ``$SEEDER_STEPS`` (:mod:`seeder._run.steps`): per-step records, the stops
  (``$SEEDER_STOP_AFTER_STEP``) and resumes (``$SEEDER_RESUME``) verify asks for;
* ``$SEEDER_TRACE`` (:mod:`seeder._run.trace`): the per-batch fingerprints of every random state;
* ``$SEEDER_LOCATE`` (:mod:`seeder._run.record`): every tensor operation fingerprinted;
* ``$SEEDER_SNAPSHOT_DIR`` (``seeder run`` adds :data:`SITE_DIR` where it is set): an
  environment snapshot (``seeder.env.capture_environment``) on rank 0 at ``init``, once per
  directory.

Then it runs the next ``sitecustomize`` on the path, if any, as Python would have. A plain run
has none of this: the core emits its events to nobody. Installing imports no torch; each
callback imports what it needs when its event first comes.

Example:
    >>> env = run_environment({"PYTHONPATH": "/src"})
    >>> env["PYTHONPATH"].split(os.pathsep) == [SITE_DIR, "/src"]
    True
    >>> install({})  # nothing asked for: nothing installed
    []
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional

from seeder import _hooks as hooks
from seeder._errors import SeederWarning
from seeder._run.variables import ENV_LOCATE, ENV_SNAPSHOT_DIR, ENV_STEPS, ENV_TRACE

__all__ = [
    "SITE_DIR",
    "install",
    "uninstall",
    "run_environment",
]

logger = logging.getLogger("seeder")

#: The directory whose ``sitecustomize`` installs the hooks at interpreter start.
SITE_DIR = str(Path(__file__).resolve().parent / "site")

#: What :func:`install` added: (event, callback), to take back out.
_installed: list[tuple[str, Callable[..., Any]]] = []
#: The snapshot directories written in this process.
_snapshots: set[str] = set()


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with :data:`SITE_DIR` first on ``PYTHONPATH``: what a tool gives the runs it
    starts (``seeder.verify._runner.child_environment``).

    Args:
        environ: the run's environment.

    Returns:
        A copy, with ``PYTHONPATH`` starting with :data:`SITE_DIR` (once).
    """
    env = dict(environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *rest])
    return env


def _steps(name: str) -> Callable[..., Any]:
    def call(**fields: Any) -> Any:
        from seeder._run import steps

        return getattr(steps, name)(**fields)

    call.__name__ = f"steps.{name}"
    return call


def _on_batch(**fields: Any) -> None:
    from seeder._run.trace import record_step

    record_step(fields.pop("seeder"), fields.pop("source"), **fields)


def _on_init_trace(seeder: Any) -> None:
    from seeder._run.trace import write_preinit

    write_preinit(seeder)


def _on_init_locate(seeder: Any) -> None:
    from seeder._run.record import start

    start(seeder)


def _on_init_snapshot(seeder: Any) -> None:
    """Rank 0's environment snapshot into ``$SEEDER_SNAPSHOT_DIR``, once per directory; one that
    cannot be written warns (:class:`seeder.SeederWarning`) and the run goes on."""
    directory = os.path.abspath(os.environ.get(ENV_SNAPSHOT_DIR) or "")
    if not os.environ.get(ENV_SNAPSHOT_DIR) or seeder.rank != 0 or directory in _snapshots:
        return
    from seeder.env._capture import capture_environment

    try:
        capture_environment(
            directory,
            extra={"master_seed": seeder.get_master_seed(), "world_size": seeder.world_size},
        )
    except OSError as exc:
        warnings.warn(
            f"environment snapshot not taken: {exc} (${ENV_SNAPSHOT_DIR}={directory}); set it "
            "to a new or empty writable directory",
            SeederWarning,
            stacklevel=2,
        )
        return
    _snapshots.add(directory)


def install(environ: Optional[Mapping[str, str]] = None) -> list[str]:
    """Add the callbacks ``environ`` (``os.environ``) asks for to :mod:`seeder._hooks`.

    A second call adds nothing until :func:`uninstall`.

    Args:
        environ: the run's environment.

    Returns:
        The variables whose callbacks were added.
    """
    env = os.environ if environ is None else environ
    if _installed:
        return []
    added: list[str] = []
    wanted: list[tuple[str, str, Callable[..., Any]]] = []
    if env.get(ENV_STEPS):
        wanted += [
            (ENV_STEPS, hooks.INIT, _steps("on_init")),
            (ENV_STEPS, hooks.CHECKPOINT, _steps("on_checkpoint")),
            (ENV_STEPS, hooks.STEP, _steps("on_step")),
            (ENV_STEPS, hooks.RESUMED, _steps("on_resumed")),
            (ENV_STEPS, hooks.STOPPED, _steps("on_stopped")),
            (ENV_STEPS, hooks.RESUME, _steps("resume_asked")),
            (ENV_STEPS, hooks.STOP_FILE, _steps("stop_file")),
        ]
    if env.get(ENV_TRACE):
        wanted += [(ENV_TRACE, hooks.INIT, _on_init_trace), (ENV_TRACE, hooks.BATCH, _on_batch)]
    if env.get(ENV_SNAPSHOT_DIR):
        wanted.append((ENV_SNAPSHOT_DIR, hooks.INIT, _on_init_snapshot))
    if env.get(ENV_LOCATE):
        wanted.append((ENV_LOCATE, hooks.INIT, _on_init_locate))
    for variable, event, callback in wanted:
        hooks.add(event, callback)
        _installed.append((event, callback))
        if variable not in added:
            added.append(variable)
    if added:
        logger.debug("seeder tools: hooks installed for %s", ", ".join(added))
    return added


def uninstall() -> None:
    """Take out every callback :func:`install` added (tests).

    >>> uninstall()
    """
    for event, callback in _installed:
        hooks.remove(event, callback)
    _installed.clear()
