"""The 2-process children of the accelerate tests in one torchrun launch (``accelerate_runs`` in
tests/conftest.py): the same ranks run each child in turn, as that child runs alone.

``python accelerate_ranks.py SCRIPT ARG... [+ SCRIPT ARG...]``: each group runs the ``__main__`` of
tests/scripts/SCRIPT with ``SCRIPT ARG...`` as its command line, e.g.::

    accelerate_ranks.py accelerate_elastic.py DIR full + stream_accelerate.py DIR2 0 full resume

Each child ends every token with ``accelerator.wait_for_everyone()``, so a group starts on every
rank once the last has finished.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Iterator, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))


def groups(argv: Sequence[str]) -> Iterator[list[str]]:
    """``argv`` split at each ``+``."""
    group: list[str] = []
    for arg in argv:
        if arg == "+":
            yield group
            group = []
        else:
            group.append(arg)
    yield group


if __name__ == "__main__":
    for script, *args in groups(sys.argv[1:]):
        sys.argv = [os.path.join(HERE, script), *args]
        runpy.run_path(sys.argv[0], run_name="__main__")
