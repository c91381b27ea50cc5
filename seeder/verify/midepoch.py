"""The mid-epoch stop of ``seeder verify``: does the command take a step stop, and where to stop.

Run (2) stops at an epoch boundary; runs (2b)/(3b) stop at a step inside an epoch and
resume from there, where most resume bugs live (a sampler position not saved, a
DataLoader that draws from torch's global RNG when its iterator restarts, worker
seeds that restart with the iterator). They need the script's step stop flag
(``--stop-after-steps S`` by default). Whether the command takes it is decided, in
this order, by :class:`StepStopSupport`:

1. an explicit stop step (``seeder verify --stop-after-steps S``): yes;
2. an empty ``stop_after_steps`` template (``--arg stop_after_steps=``): no;
3. a template the user set with ``--arg``, or one without an option word: yes;
4. a ``.py`` file of the command whose text contains the flag (``--stop-after-steps``): yes;
5. otherwise ``COMMAND --help`` runs once (in the background, at most 60 s) and the
   flag must appear in its output.

The stop step comes from run (2)'s metrics (:func:`mid_epoch_step`): the odd step
nearest the middle of run (2)'s last epoch, so that the resumed run (3b) also crosses
an epoch boundary.

Example:
    >>> import numpy as np
    >>> from seeder.verify import Metrics
    >>> half = Metrics([(k,) for k in range(16)], np.zeros(16), [k // 8 for k in range(16)])
    >>> mid_epoch_step(half)   # 8 steps in epoch 0, then 5 of the 8 of epoch 1
    (13, '5 of 8 steps into epoch 1')
    >>> flag_word("--stop-after-steps {steps}"), flag_word("--stop={steps}")
    ('--stop-after-steps', '--stop')
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .contract import Contract, Metrics

__all__ = ["StepStopSupport", "flag_word", "has_flag", "mid_epoch_step", "mentions", "help_output", "HELP_TIMEOUT"]

#: Seconds ``COMMAND --help`` may take before the answer is "cannot tell".
HELP_TIMEOUT = 60.0


def has_flag(text: str, flag: str) -> bool:
    """Whether ``text`` names the option ``flag`` as a whole word (``--seed`` is not in ``--seed_everything``).

    >>> has_flag("[--seed SEED]", "--seed"), has_flag("[--seed_everything S]", "--seed")
    (True, False)
    """
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


def flag_word(template: str) -> Optional[str]:
    """The option a template passes (``--stop-after-steps`` of ``--stop-after-steps {steps}``), or ``None``."""
    for word in shlex.split(template):
        if word.startswith("-"):
            return word.split("=", 1)[0]
    return None


def mentions(command: Sequence[str], flag: str, cwd: Optional[Path]) -> Optional[str]:
    """A ``.py`` file of the command whose text contains ``flag``, or ``None``."""
    for word in command:
        if not word.endswith(".py"):
            continue
        path = Path(word) if os.path.isabs(word) or cwd is None else Path(cwd) / word
        try:
            if has_flag(path.read_text(encoding="utf-8", errors="replace"), flag):
                return word
        except OSError:
            continue
    return None


def help_output(command: Sequence[str], env: Dict[str, str], cwd: Optional[Path], timeout: float) -> Tuple[Optional[str], str]:
    """``(output, problem)`` of ``COMMAND --help``; output ``None`` when it could not be read."""
    try:
        proc = subprocess.Popen(list(command) + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=str(cwd) if cwd else None, start_new_session=True)
    except OSError as exc:
        return None, f"could not start it ({exc})"
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.communicate()
        return None, f"it did not finish within {timeout:g} s"
    return out.decode("utf-8", errors="replace"), "" if proc.returncode == 0 else f"it exited with status {proc.returncode}"


class StepStopSupport:
    """Whether a training command takes the contract's step stop flag; decided at once or by a background probe.

    :meth:`result` returns ``(supported, how it was decided)``; it waits for the probe
    if one is running.

    >>> StepStopSupport(["python", "train.py"], Contract(stop_after_steps="")).result()
    (False, 'the contract has no stop_after_steps flag (--arg stop_after_steps= leaves it out)')
    """

    def __init__(self, command: Sequence[str], contract: Contract, *, explicit_step: bool = False,
                 env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None, timeout: float = HELP_TIMEOUT):
        self._result: Optional[Tuple[bool, str]] = None
        self._thread: Optional[threading.Thread] = None
        template = contract.stop_after_steps
        flag = flag_word(template) if template else None
        if explicit_step:
            self._result = (True, "the stop step was given (--stop-after-steps)")
        elif not template:
            self._result = (False, "the contract has no stop_after_steps flag (--arg stop_after_steps= leaves it out)")
        elif template != Contract().stop_after_steps or flag is None:
            self._result = (True, f"the contract passes {template!r} (set with --arg)")
        else:
            found = mentions(command, flag, cwd)
            if found is not None:
                self._result = (True, f"{found} mentions {flag}")
            else:
                self._thread = threading.Thread(target=self._probe, args=(list(command), flag, env or dict(os.environ),
                                                                            cwd, timeout), daemon=True)
                self._thread.start()

    def _probe(self, command: List[str], flag: str, env: Dict[str, str], cwd: Optional[Path], timeout: float) -> None:
        out, problem = help_output(command, env, cwd, timeout)
        shown = " ".join(shlex.quote(w) for w in command) + " --help"
        if out is not None and has_flag(out, flag):
            self._result = (True, f"`{shown}` lists {flag}")
        elif out is not None and not problem:
            self._result = (False, f"`{shown}` does not list {flag}; a script that takes it (exit after global step S "
                            "with a checkpoint) gets a mid-epoch stop, or name yours with --arg stop_after_steps=TEMPLATE")
        else:
            self._result = (False, f"could not tell whether the command takes {flag}: `{shown}`: {problem}; pass "
                            "--stop-after-steps S to force a mid-epoch stop")

    def result(self) -> Tuple[bool, str]:
        if self._thread is not None:
            self._thread.join()
        assert self._result is not None
        return self._result


def mid_epoch_step(half: Metrics, epochs: Optional[int] = None, *, after_first: bool = False) -> Tuple[Optional[int], str]:
    """The global step (a count of steps) at which to stop mid-epoch, from run (2)'s metrics, and where it lies.

    The stop is inside run (2)'s last epoch, at the odd step nearest its middle (an odd
    step also shifts the batch-to-worker assignment of a DataLoader with two workers).
    Where the metrics carry no epochs, run (2)'s ``epochs`` (X/2) divide its steps.
    With ``after_first``, a run (2) of one epoch puts the stop in epoch 1 instead (an
    epoch as long as epoch 0): a stop in the first epoch passes by luck for a script
    that saves no RNG state but seeds at its start. ``(None, why)`` when every epoch is
    a single step.

    >>> import numpy as np
    >>> one = Metrics([(k,) for k in range(8)], np.zeros(8), [0] * 8)
    >>> mid_epoch_step(one), mid_epoch_step(one, after_first=True)
    ((5, '5 of 8 steps into epoch 0'), (13, '5 of 8 steps into epoch 1'))
    """
    n = len(half)
    if n == 0:
        return None, "run (2) logged no steps"
    logged = half.epochs
    if all(e is not None for e in logged):
        last = logged[-1]
        per_epoch = sum(1 for e in logged if e == last)
        index = len(set(logged)) - 1
    else:  # epochs not logged: assume epochs of equal length
        per_epoch = n // epochs if epochs else n
        last = index = (epochs - 1) if epochs else 0
    if per_epoch < 2:
        return None, "each epoch is a single step, so there is no step inside an epoch to stop at"
    into = per_epoch // 2
    if into % 2 == 0:
        into += 1
    into = min(into, per_epoch - 1)
    if after_first and index == 0:  # run (2) ran the first epoch only: stop in the next one
        return n + into, f"{into} of {per_epoch} steps into epoch {last + 1}"
    return n - per_epoch + into, f"{into} of {per_epoch} steps into epoch {last}"
