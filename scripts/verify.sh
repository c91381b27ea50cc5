#!/usr/bin/env bash
# The main job: install seeder (keeps an existing torch, else torch==2.13.0) and run the
# verification methodology on the bundled examples/train.py. Extra arguments go to `seeder verify`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dali,plot
exec "${PYTHON:-python3}" -m seeder verify "$@"
