#!/usr/bin/env bash
# Installs what the project needs into the current Python (idempotent; seconds when already done).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch 2.13.0"
  "$PY" -m pip install -q "torch==2.13.0"
fi
if ! "$PY" -c "import transformers, datasets, papermill, nbval, seaborn, tqdm, psutil" 2>/dev/null; then
  echo "[setup] installing requirements.txt"
  "$PY" -m pip install -q -r requirements.txt
fi
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true
