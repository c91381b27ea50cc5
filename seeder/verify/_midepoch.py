"""The mid-epoch stop of ``seeder verify``: does the command take a step stop, and where to stop.

Run (2) stops at an epoch boundary; runs (2b)/(3b) stop at a step inside an epoch and
resume from there, where most resume bugs live (a sampler position not saved, a
DataLoader that draws from torch's global RNG when its iterator restarts, worker
seeds that restart with the iterator). A script that uses seeder is stopped by seeder
itself; one that does not needs a step stop flag, which :class:`StepStopSupport` decides
from what verify already knows, without running anything:

1. an explicit stop step (``seeder verify --stop-after-steps S``): yes;
2. an empty ``stop_after_steps`` template (the script's parser takes no such flag, or
   ``--arg stop_after_steps=``): no;
3. a template (the parser's flag, or one set with ``--arg``): yes.

The stop step comes from run (2)'s metrics (:func:`mid_epoch_step`): the odd step
nearest the middle of run (2)'s last epoch, so that the resumed run (3b) also crosses
an epoch boundary.

Example:
    >>> import numpy as np
    >>> from seeder.verify import Metrics
    >>> half = Metrics([(k,) for k in range(16)], np.zeros(16), [k // 8 for k in range(16)])
    >>> mid_epoch_step(half)   # 8 steps in epoch 0, then 5 of the 8 of epoch 1
    (13, '5 of 8 steps into epoch 1')
"""

from __future__ import annotations

from typing import Optional

from seeder.verify._contract import Contract, Metrics

__all__ = ["StepStopSupport", "mid_epoch_step"]


class StepStopSupport:
    """Whether a training command takes the contract's step stop flag, decided without running it.

    Args:
        contract: the flags verify passes (after the parser probe).
        explicit_step: whether the user gave the stop step (``--stop-after-steps S``).

    >>> supported, why = StepStopSupport(Contract(stop_after_steps="")).result()
    >>> supported, why[:34]
    (False, 'the script takes no step stop flag')
    >>> StepStopSupport(Contract(stop_after_steps="--max-steps {steps}")).result()
    (True, "the contract passes '--max-steps {steps}'")
    """

    def __init__(self, contract: Contract, *, explicit_step: bool = False):
        template = contract.stop_after_steps
        if explicit_step:
            self._result = (True, "the stop step was given (--stop-after-steps)")
        elif not template:
            self._result = (
                False,
                "the script takes no step stop flag (pass --stop-after-steps S, or name it with "
                "--arg stop_after_steps=TEMPLATE)",
            )
        else:
            self._result = (True, f"the contract passes {template!r}")

    def result(self) -> tuple[bool, str]:
        """``(supported, how it was decided)``."""
        return self._result


def mid_epoch_step(
    half: Metrics, epochs: Optional[int] = None, *, after_first: bool = False
) -> tuple[Optional[int], str]:
    """The global step (a count of steps) at which to stop mid-epoch, from run (2)'s metrics, and
    where it lies.

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
    logged = [e for e in half.epochs if e is not None]
    if len(logged) == n:
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
