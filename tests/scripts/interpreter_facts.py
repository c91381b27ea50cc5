#!/usr/bin/env python
"""Records what this interpreter started with, then runs ``examples/train.py`` as ``__main__``.

    python tests/scripts/interpreter_facts.py [train.py arguments]

Appends one JSON line to ``$SEEDER_TEST_FACTS`` before anything is imported: the interpreter's pid,
its ``str`` hash of a fixed word (``hash`` is salted per interpreter unless ``PYTHONHASHSEED`` fixes
it), whether hash randomisation is on, and which of torch, NumPy and seeder's seeding are
already imported (none, in a fresh interpreter, where the tools' ``sitecustomize`` imports only
seeder's hook point; all, in a child forked from a server that used them).
"""

import json
import os
import runpy
import sys
from pathlib import Path

with open(os.environ["SEEDER_TEST_FACTS"], "a") as facts:
    facts.write(
        json.dumps(
            {
                "pid": os.getpid(),
                "hash": hash("seeder"),
                "randomised": sys.flags.hash_randomization,
                "imported": sorted({"torch", "numpy", "seeder._seeding"} & set(sys.modules)),
            }
        )
        + "\n"
    )

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"
sys.argv[0] = str(TRAIN)
sys.path[0] = str(TRAIN.parent)  # what ``python examples/train.py`` puts first
runpy.run_path(str(TRAIN), run_name="__main__")
