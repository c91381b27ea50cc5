"""``seeder run``: start a command with what must be set before the interpreter starts.

:func:`launch_environment` computes the variables (``SEEDER_SEED``,
``PYTHONHASHSEED``, ``CUBLAS_WORKSPACE_CONFIG``, and with ``deterministic``
``SEEDER_DETERMINISTIC=1`` and ``HOROVOD_FUSION_THRESHOLD=0``);
:func:`run_command` starts the command with them, forwards signals to it and
returns its exit code the way a shell does (``128 + N`` when it died of signal N).

Example:
    >>> env = launch_environment(42, environ={})
    >>> env["SEEDER_SEED"], env["CUBLAS_WORKSPACE_CONFIG"]
    ('42', ':4096:8')
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Optional

from seeder._checks import check_bool
from seeder._seeding.derive import ENV_SEED, resolve_master_seed
from seeder._seeding.determinism import CUBLAS_WORKSPACE_DEFAULT, python_hash_seed

__all__ = [
    "launch_environment",
    "run_command",
    "exit_code",
    "FORWARDED_SIGNALS",
    "LAUNCH_VARIABLES",
]

logger = logging.getLogger("seeder")

#: Signals passed on to the command (SLURM and schedulers send SIGTERM/SIGUSR1 before killing a
#: job).
FORWARDED_SIGNALS = tuple(
    getattr(signal, n)
    for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, n)
)
#: Variables :func:`launch_environment` may set, in the order they are reported.
LAUNCH_VARIABLES = (
    "SEEDER_SEED",
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "SEEDER_DETERMINISTIC",
    "HOROVOD_FUSION_THRESHOLD",
)
# Linux si_code of signals the kernel sends itself, e.g. the terminal's Ctrl-C to its foreground
# group
_SI_KERNEL = 0x80


def launch_environment(
    master_seed: Optional[int] = None,
    *,
    deterministic: bool = False,
    environ: Optional[Mapping[str, str]] = None,
) -> dict[str, str]:
    """The environment ``seeder run`` gives the command: ``environ`` (``os.environ``) plus the
    launch variables.

    The master seed is ``master_seed``, else ``$SEEDER_SEED``, else one drawn from OS entropy.
    ``PYTHONHASHSEED`` is :func:`seeder.env.python_hash_seed` of it (any value already
    there is replaced), ``CUBLAS_WORKSPACE_CONFIG`` is set to ``:4096:8`` when missing.
    ``deterministic=True`` adds ``SEEDER_DETERMINISTIC=1`` (``seeder.init`` then calls
    ``enforce_determinism``) and ``HOROVOD_FUSION_THRESHOLD=0``.

    >>> launch_environment(7, deterministic=True, environ={})["SEEDER_DETERMINISTIC"]
    '1'
    """
    check_bool(deterministic, "deterministic")
    env = dict(os.environ if environ is None else environ)
    seed, _ = resolve_master_seed(master_seed, env, "--seed")
    env[ENV_SEED] = str(seed)
    env["PYTHONHASHSEED"] = str(python_hash_seed(seed))
    if not env.get("CUBLAS_WORKSPACE_CONFIG"):
        env["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_DEFAULT
    if deterministic:
        env["SEEDER_DETERMINISTIC"] = "1"
        env["HOROVOD_FUSION_THRESHOLD"] = "0"
    return env


def exit_code(wait_status: int) -> int:
    """A shell's exit code for a ``waitpid`` status: the code, or ``128 + N`` after signal N.

    >>> exit_code(3 << 8), exit_code(15)
    (3, 143)
    """
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


def run_command(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> int:
    """Run ``argv`` (looked up on ``PATH``) with ``env``, forwarding signals; return its exit code.

    SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to this process are sent
    on to the command. A Ctrl-C typed in the terminal already reaches the command (it
    shares the terminal's foreground process group), so on Linux that one is not sent
    twice. Returns the command's exit code, or ``128 + N`` if it died of signal ``N``.
    Raises ``FileNotFoundError``/``PermissionError`` if the command cannot be started.
    Call it from the main thread.

    >>> run_command([sys.executable, "-c", "raise SystemExit(3)"])
    3
    """
    args = [os.fspath(a) for a in argv]
    if not args:
        raise ValueError(
            "no command to run; give one after `--`, e.g. seeder run -- python train.py"
        )
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("run_command() must be called from the main thread (it handles signals)")
    child_env = dict(os.environ if env is None else env)
    if hasattr(signal, "sigtimedwait") and hasattr(os, "posix_spawnp"):
        return _run_sigwait(args, child_env)
    return _run_handlers(args, child_env)  # pragma: no cover - no sigtimedwait (macOS)


def _spawn(args: list[str], env: dict[str, str], sigmask: Iterable[int] = ()) -> int:
    # Python ignores SIGPIPE and SIGXFSZ; give the command the defaults (as subprocess does).
    sigdef = tuple(getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n))
    return os.posix_spawnp(args[0], args, env, setsigmask=sigmask, setsigdef=sigdef)


def _is_duplicate(info: signal.struct_siginfo, pid: int) -> bool:
    """True for a terminal-generated signal that the command, in our process group, received too."""
    if not sys.platform.startswith("linux") or info.si_code != _SI_KERNEL:
        return False
    try:
        return os.getpgid(pid) == os.getpgrp()
    except OSError:
        return False


def _forward(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _run_sigwait(args: list[str], env: dict[str, str]) -> int:
    waited = set(FORWARDED_SIGNALS) | {signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        pid = _spawn(args, env, sigmask=old_mask)
        while True:
            info = signal.sigtimedwait(waited, 0.5)
            if (
                info is not None
                and info.si_signo != signal.SIGCHLD
                and not _is_duplicate(info, pid)
            ):
                _forward(pid, info.si_signo)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                break
        while signal.sigtimedwait(waited, 0) is not None:  # drop what arrived as the command exited
            pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return exit_code(status)


def _run_handlers(args: list[str], env: dict[str, str]) -> int:
    """Fallback without ``sigtimedwait``: Python handlers forward every signal."""
    pending: list[int] = []  # signals that arrived before the command started
    started: list[int] = []  # the command's pid once spawned: the handler reads it

    def handler(signum: int, frame: object) -> None:
        if started:
            _forward(started[0], signum)
        else:
            pending.append(signum)

    previous = {s: signal.signal(s, handler) for s in FORWARDED_SIGNALS}
    try:
        pid = _spawn(args, env)
        started.append(pid)
        for signum in pending:
            _forward(pid, signum)
        _, status = os.waitpid(pid, 0)  # retried after each handler (PEP 475)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return exit_code(status)
