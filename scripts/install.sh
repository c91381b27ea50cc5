#!/usr/bin/env bash
# Install seeder in editable mode with the given extras (default: all of them).
# An existing torch is kept; without one, torch==2.13.0 is installed first, so
# that pip never resolves "torch" to the newest multi-GB CUDA build. Extras that
# depend on torch (lightning, transformers, accelerate, torchdata) are installed
# under a constraint that pins the torch already present, so they never replace it.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dali,plot,lightning,transformers,accelerate,test}"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install --quiet "torch==2.13.0"
fi
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$PY" -c "import torch; print('torch==' + torch.__version__)" > "$constraints"
"$PY" -m pip install --quiet -c "$constraints" -e ".[${extras}]"
