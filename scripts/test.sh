#!/usr/bin/env bash
# Install seeder with every extra, check style (ruff) and types (mypy), and run the whole test suite
# (slow multi-process tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dali,plot,lightning,transformers,accelerate,test
PY="${PYTHON:-python3}"
# Style and types first (settings in pyproject.toml): a finding fails the run before the tests start.
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy
exec "$PY" -m pytest "$@"
