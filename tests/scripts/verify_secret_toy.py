"""verify_toy.py behind a careless wrapper: it takes secrets on its command line and prints them
with the environment's planted secrets (as a script that logs its whole configuration would), then
runs the toy with the rest of its arguments. ``tests/test_secrets.py`` checks that none of it
reaches seeder's files."""

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TAKES_VALUE = ("--db-password", "--api-key", "--secret", "--notify")

args, config = [], []
argv = sys.argv[1:]
i = 0
while i < len(argv):
    if argv[i] in TAKES_VALUE:
        config += argv[i : i + 2]
        i += 2
        continue
    (config if argv[i].startswith(("--token=", "--password=")) else args).append(argv[i])
    i += 1
names = os.environ.get("PLANTED_NAMES", "").split(",")
print("config:", config, flush=True)
print(
    "environment:", " ".join(f"{k}={os.environ[k]}" for k in names if k in os.environ), flush=True
)
print("values:", *(os.environ[k] for k in names if k in os.environ), flush=True)
sys.argv = [os.path.join(HERE, "verify_toy.py")] + args
sys.path.insert(0, HERE)
runpy.run_path(sys.argv[0], run_name="__main__")
