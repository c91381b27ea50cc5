#!/usr/bin/env bash
# Install seeder with every extra, check style (ruff) and types (mypy), and run the whole test suite
# (slow multi-process tests included) on pytest-xdist workers: one per core, at most 4, as each test
# of real processes starts a few itself. SEEDER_TEST_WORKERS=N sets the number (0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dali,plot,lightning,transformers,accelerate,test
PY="${PYTHON:-python3}"
# Style and types first (settings in pyproject.toml): a finding fails the run before the tests start.
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy
cores="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
workers="${SEEDER_TEST_WORKERS:-$((cores < 4 ? cores : 4))}"
# loadgroup: the tests of a module marked xdist_group (a module-scoped fixture shared by its tests:
# one verify run, say) go to one worker; the others are spread one by one.
exec "$PY" -m pytest -n "$workers" --dist loadgroup "$@"
