#!/usr/bin/env bash
# Install seeder with every extra and run the whole test suite (slow multi-process tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dali,plot,lightning,transformers,accelerate,test
exec "${PYTHON:-python3}" -m pytest "$@"
