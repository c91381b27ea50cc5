#!/usr/bin/env python
"""``python -m torch.distributed.run ARGS`` for tests/helpers.py's ``torchrun``, which forks it from
a ``ForkServer`` that imported ``torch.distributed.run`` once (the agent's start is not what a test
is about; its
workers, the ranks, are their own fresh Pythons)::

    python tests/scripts/torchrun_agent.py --nproc-per-node 2 ... script.py args
"""

import os
import runpy
import sys

sys.path[0] = os.getcwd()  # what ``python -m`` puts first, not this script's directory
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
