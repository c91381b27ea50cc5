"""verify_toy.py (or the script named first) behind a careless wrapper: it takes secrets on its
command line and prints them with the environment's planted secrets (as a script that logs its whole
configuration would), then runs the toy with the rest of its arguments. ``tests/test_secrets.py``
checks that none of it reaches seeder's files or output.

Its own arguments: the values of ``TAKES_VALUE`` flags, ``--token=``-like pairs, ``NAME=value``
pairs, and words that follow no flag (positional secrets, URLs, JSON)."""

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TAKES_VALUE = ("--db-password", "--api-key", "--secret", "--notify", "--token", "--hf_token")
PAIRS = ("--token=", "--password=", "--pass=", "--api-key=")

argv = sys.argv[1:]
inner = os.path.join(HERE, "verify_toy.py")
if argv and argv[0].endswith(".py"):
    inner, argv = os.path.abspath(argv[0]), argv[1:]
args, config = [], []
i = 0
while i < len(argv):
    if argv[i] in TAKES_VALUE:
        config += argv[i : i + 2]
        i += 2
        continue
    word = argv[i]
    mine = word.startswith(PAIRS) or (
        not word.startswith("-") and ("=" in word or i == 0 or not argv[i - 1].startswith("-"))
    )
    (config if mine else args).append(word)
    i += 1
names = os.environ.get("PLANTED_NAMES", "").split(",")
print("config:", config, flush=True)
print(
    "environment:", " ".join(f"{k}={os.environ[k]}" for k in names if k in os.environ), flush=True
)
print("values:", *(os.environ[k] for k in names if k in os.environ), flush=True)
sys.argv = [inner] + args
sys.path.insert(0, HERE)
runpy.run_path(sys.argv[0], run_name="__main__")
