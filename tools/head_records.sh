#!/usr/bin/env bash
# Measure again every committed record that drafts with the EAGLE-3 head (weights/smollm2-eagle3), after a new one is
# published (`python -m dynatree_lib build-draft --head eagle3 --publish`), then render every notebook, the card and
# the README from the JSON (./run_all.sh --render). tests/test_records_weights.py fails until this has run.
# To publish the committed checkpoint again as an export writes it now (matmul weights on int8 rows: core/int8_rows.py),
# export it first: `python -m dynatree_lib build-draft --head eagle3 --steps 1` (no step left to train: it exports).
#   bash tools/head_records.sh [--from STEP]   (about two hours on 2 CPU cores; most steps are timed: run it alone)
# Steps, in order (--from resumes at one): pair (the pair report: agreement, calibration), cost (the head's step
# over the target's), depth (EAGLE-3's tree, tokens per verification), memory, lookup (v4's lookup against one
# refitted to the head), heads (notebook 13), talon_tuning and talon (notebook 14), llamacpp (llama.cpp's exactness
# record), render. Build llama.cpp first
# (bash tools/build_llamacpp.sh): `talon` has a llama.cpp row, and an experiment this machine cannot measure whole
# keeps its records (experiments.run).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONHASHSEED=0
PY=${PYTHON:-python3}
HEAD_REF=eagle3:weights/smollm2-eagle3
STEPS=(pair cost depth memory lookup heads talon_tuning talon llamacpp render)
FROM=${STEPS[0]}
case "${1:-}" in
  --from) FROM=${2:?--from needs a step: ${STEPS[*]}} ;;
  "") ;;
  *) echo "usage: tools/head_records.sh [--from STEP]  (steps: ${STEPS[*]})" >&2; exit 2 ;;
esac
[[ " ${STEPS[*]} " == *" $FROM "* ]] || { echo "unknown step '$FROM' (steps: ${STEPS[*]})" >&2; exit 2; }
# Every committed cpu record was timed on the fused bf16 engine; a machine without it would time another engine
# into the same tables.
"$PY" -c "import sys; from dynatree_lib.core import kernels; sys.exit(0 if kernels.available() else 3)" || {
  echo "tools/head_records.sh: this machine cannot run the fused bf16 engine (a CPU with AVX512-BF16 and g++/ninja:" \
       "docs/engine.md) that timed every committed cpu record; measure on one that can" >&2; exit 3; }

run_step() {
  case "$1" in
    pair) "$PY" -c "from dynatree_lib.harness.pair import run_pair; from dynatree_lib.harness.profiles import get_profile
run_pair(get_profile('cpu', draft='$HEAD_REF'), rerun=True, name='pair_eagle3')" ;;
    cost) "$PY" tools/head_cost.py --head "$HEAD_REF" ;;
    depth) "$PY" tools/head_tree_depth.py --head "$HEAD_REF" ;;
    memory) "$PY" tools/memory_head.py --head "$HEAD_REF" --rerun ;;
    lookup) "$PY" tools/head_lookup.py --head "$HEAD_REF" ;;
    heads|talon_tuning|talon) "$PY" -m dynatree_lib bench --experiment "$1" --rerun ;;
    llamacpp) "$PY" tools/llamacpp_eagle3.py run ;;
    render) ./run_all.sh --render ;;
  esac
}

started=0
for s in "${STEPS[@]}"; do
  [ "$s" = "$FROM" ] && started=1
  [ "$started" = 1 ] || continue
  echo "[head_records] $(date +%H:%M:%S) $s"
  run_step "$s"
done
echo "[head_records] $(date +%H:%M:%S) done"
