"""Child of `seeder run` in tests: reports its environment, then optionally waits for signals.

Prints ``PROBE {json}`` (rank, hash("abc"), launch variables; with --init also the master seed
``seeder.init()`` found and whether deterministic algorithms are on). ``--wait`` installs its signal
handlers, then prints ``READY <rank>`` and waits for a signal (at most 120 s); with ``--handle``
SIGTERM/SIGINT/SIGUSR1 print ``GOT <name> <rank>`` and exit ``--exit-code``. ``--count-sigint``
collects SIGINTs until none came for a second and prints ``SIGINTS [[si_code, si_pid], ...]``.
"""

import argparse
import json
import os
import signal
import sys
import time


def emit(line: str) -> None:
    """One write per line: the lines of two ranks sharing a pipe never interleave."""
    os.write(1, (line + "\n").encode())


VARS = (
    "SEEDER_SEED",
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    "SEEDER_DETERMINISTIC",
    "HOROVOD_FUSION_THRESHOLD",
)

parser = argparse.ArgumentParser()
parser.add_argument("--init", action="store_true")
parser.add_argument("--wait", action="store_true")
parser.add_argument("--handle", action="store_true")
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--count-sigint", action="store_true")
args = parser.parse_args()

rank = int(os.environ.get("RANK", "0"))
info = {"rank": rank, "hash": hash("abc"), **{k: os.environ.get(k) for k in VARS}}
if args.init:
    import torch

    import seeder

    seeder.init()
    info["master_seed"] = seeder.get_master_seed()
    info["deterministic"] = torch.are_deterministic_algorithms_enabled()
emit("PROBE " + json.dumps(info))

if (
    args.count_sigint
):  # each SIGINT with its origin (si_code 0x80: the terminal; 0: kill() by si_pid)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    emit("READY")
    got = [signal.sigtimedwait({signal.SIGINT}, 60)]
    while got[-1] is not None:
        got.append(signal.sigtimedwait({signal.SIGINT}, 1.0))
    emit("SIGINTS " + json.dumps([[i.si_code, i.si_pid] for i in got if i is not None]))
    sys.exit(0)

if args.wait:
    if args.handle:

        def handler(signum, frame):
            emit(f"GOT {signal.Signals(signum).name} {rank}")
            sys.exit(args.exit_code)

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
            signal.signal(s, handler)
    else:
        # What an interactive Python has. Set explicitly: a job started in the background of a
        # non-interactive shell (CI) inherits SIGINT ignored, and Python then leaves it ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(s, signal.SIG_DFL)
    emit(f"READY {rank}")  # only now: every handler this process will use is in place
    time.sleep(120)
    emit("TIMEOUT")
    sys.exit(3)
