"""The drawn master seed on stderr: a run whose seed was drawn can always be replayed.

``seeder.init()`` without a seed (and without ``$SEEDER_SEED``) draws one from OS
entropy. Besides the ``seeder`` logger's INFO record, rank 0 writes one line to
stderr, whatever the logging configuration, so that a script that only prints still
shows it::

    seeder: master seed 1234567 drawn from OS entropy (replay with SEEDER_SEED=1234567)

``SEEDER_QUIET=1`` silences the line (the log record stays).

Example:
    >>> drawn_seed_line(5)
    'seeder: master seed 5 drawn from OS entropy (replay with SEEDER_SEED=5)'
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

__all__ = ["ENV_QUIET", "drawn_seed_line", "show_drawn_seed", "parse_drawn_seed"]

#: Environment variable: a true value (1, true, yes, on) keeps the drawn seed off stderr.
ENV_QUIET = "SEEDER_QUIET"

_LINE = re.compile(r"^seeder: master seed (\d+) drawn from OS entropy", re.MULTILINE)


def drawn_seed_line(seed: int) -> str:
    """The stderr line for a drawn master seed."""
    return f"seeder: master seed {seed} drawn from OS entropy (replay with SEEDER_SEED={seed})"


def show_drawn_seed(seed: int) -> None:
    """Write :func:`drawn_seed_line` to stderr unless ``$SEEDER_QUIET`` is true (called by rank 0's
    ``init``)."""
    if os.environ.get(ENV_QUIET, "").strip().lower() in ("1", "true", "yes", "on"):
        return
    try:
        sys.stderr.write(drawn_seed_line(seed) + "\n")
        sys.stderr.flush()
    except (
        OSError,
        ValueError,
        AttributeError,
    ):
        # a closed or missing stderr must not stop the run
        pass


def parse_drawn_seed(text: str) -> Optional[int]:
    """The first drawn master seed announced in ``text`` (a run's output), or ``None``.

    >>> parse_drawn_seed("x\\n" + drawn_seed_line(42) + "\\n")
    42
    """
    m = _LINE.search(text)
    return int(m.group(1)) if m else None
