#!/usr/bin/env bash
# The README's main command. Runs notebooks 00-08 in order with papermill for one profile.
#   ./run_all.sh                 embedded offline default (profile "cpu"; trains its models on first use)
#   ./run_all.sh paper           Pythia-2.8B/70M on a GPU with hub access
#   ./run_all.sh smoke           tiny models, seconds
#   ./run_all.sh cpu --render    re-render tables and figures from existing JSON only (no experiments)
#   ./run_all.sh cpu --rerun     archive existing JSON and run every experiment again
# Executed notebooks go to executed/<profile>/, JSON to results/<profile>/, figures and tables to
# figures/<profile>/. Stops at the first failing notebook.
set -euo pipefail
cd "$(dirname "$0")"
PROFILE=cpu
RERUN=False
for arg in "$@"; do
  case "$arg" in
    --render) export DYNATREE_RENDER_ONLY=1 ;;
    --rerun) RERUN=True ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "unknown option $arg" >&2; exit 2 ;;
    *) PROFILE=$arg ;;
  esac
done
case "$PROFILE" in cpu|paper|smoke) ;; *) echo "unknown profile '$PROFILE' (choose cpu, paper or smoke)" >&2; exit 2 ;; esac
bash setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # kernels import the checkout even if the editable install is elsewhere
PY=${PYTHON:-python3}
OUT=executed/$PROFILE
mkdir -p "$OUT"
export PYTHONHASHSEED=0
start=$(date +%s)
for nb in notebooks/[0-9][0-9]_*.ipynb; do
  name=$(basename "$nb")
  echo "[run_all] $(date +%H:%M:%S) $name (profile $PROFILE)"
  if ! "$PY" -m papermill "$nb" "$OUT/$name" -p profile "$PROFILE" -p rerun "$RERUN" --cwd notebooks \
       --progress-bar --stdout-file /dev/null; then
    echo "[run_all] FAILED in $name; the executed notebook with the error is $OUT/$name" >&2
    exit 1
  fi
done
echo "[run_all] done in $(( $(date +%s) - start ))s: notebooks in $OUT, JSON in results/$PROFILE, figures in figures/$PROFILE"
