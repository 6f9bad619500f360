#!/usr/bin/env bash
# The README's main command: runs the numbered notebooks in order with papermill for one profile.
#   ./run_all.sh                 the cpu reproduction (SmolLM2-135M + our committed draft; no training)
#   ./run_all.sh paper           Pythia-2.8B/70M on a GPU with hub access (./run_all.sh paper --plan first)
#   ./run_all.sh paper-dryrun    the paper profile's code path on a CPU with tiny Pythia-shaped models
#   ./run_all.sh authors         the authors' code's protocol (character-cut prompts, their settings) on a GPU
#   ./run_all.sh smoke           tiny models: renders in about two minutes, --rerun measures in about six
#   ./run_all.sh authors-dryrun  the authors profile's code path on a CPU with tiny models
#   --render    rebuild every table and figure from the logged JSON only (measure nothing)
#   --rerun     archive each notebook's JSON (kept as *.bak.json) and measure again
#   --quick     a first look: 2 prompts per dataset, 1 per Spec-Bench category, 1 replicate, no sweeps (05-07)
#   --plan      print generations, tokens and estimated hours per notebook; run nothing
#   --allow-dirty  keep records measured on a tree with uncommitted changes (marked git_dirty; refused otherwise)
#   --allow-busy   time even while another process computes (the records say so; refused otherwise)
#   --set FIELD=VALUE  override a profile field in every notebook (as `python -m dynatree_lib --set`), repeatable
#   --only=NN   run only the notebook numbered NN (e.g. --only=12 --render), with the same papermill call
# Executed notebooks go to executed/<profile>/, JSON to results/<profile>/, figures and tables to
# figures/<profile>/. Stops at the first failing notebook. DYNATREE_PAIRED=1 skips pairing notebooks/*.py with their
# .ipynb (done already: tools/clean_render.sh runs profiles side by side).
set -euo pipefail
cd "$(dirname "$0")"
PROFILE=cpu RERUN=False RENDER=False QUICK=0 PLAN=0 ONLY="" SETS=()
while [ $# -gt 0 ]; do
  arg=$1
  shift
  case "$arg" in
    --render) RENDER=True ;;
    --rerun) RERUN=True ;;
    --quick) QUICK=1 ;;
    --plan) PLAN=1 ;;
    --allow-dirty) export DYNATREE_ALLOW_DIRTY=1 ;;
    --allow-busy) export DYNATREE_ALLOW_BUSY=1 ;;
    --set) [ $# -gt 0 ] || { echo "--set needs FIELD=VALUE" >&2; exit 2; }; SETS+=("$1"); shift ;;
    --set=*) SETS+=("${arg#--set=}") ;;
    --only=[0-9][0-9]) ONLY=${arg#--only=} ;;
    --only=*) echo "--only takes a notebook's two digits, e.g. --only=03 (got $arg)" >&2; exit 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) echo "unknown option $arg (see ./run_all.sh --help)" >&2; exit 2 ;;
    *) PROFILE=$arg ;;
  esac
done
case "$PROFILE" in cpu|paper|paper-dryrun|authors|authors-dryrun|smoke) ;;
  *) echo "unknown profile '$PROFILE' (choose cpu, paper, paper-dryrun, authors, authors-dryrun or smoke)" >&2; exit 2 ;; esac
if [ -n "$ONLY" ] && ! compgen -G "notebooks/${ONLY}_*.py" >/dev/null; then
  echo "--only=$ONLY: no notebook notebooks/${ONLY}_*.py" >&2; exit 2
fi
bash setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # kernels import the checkout even if the editable install is elsewhere
PY=${PYTHON:-python3}
SET_ARGS=()
for s in ${SETS[@]+"${SETS[@]}"}; do SET_ARGS+=(--set "$s"); done
if [ "$PLAN" = 1 ]; then
  exec "$PY" -m dynatree_lib plan --profile "$PROFILE" $([ "$QUICK" = 1 ] && echo --quick) ${SET_ARGS[@]+"${SET_ARGS[@]}"}
fi
OVERRIDES=$("$PY" -c "import json, sys
from dynatree_lib.cli import QUICK, overrides
from dynatree_lib.harness.setup.profiles import get_profile
try:
    sets = overrides(sys.argv[2:])
    get_profile(sys.argv[1], **sets)  # an unknown field is refused here, by name, before any notebook starts
except ValueError as e:
    sys.exit(f'error: --set: {e}')
print(json.dumps({**(QUICK if '$QUICK' == '1' else {}), **sets}))" "$PROFILE" ${SETS[@]+"${SETS[@]}"})
OUT=executed/$PROFILE
mkdir -p "$OUT"
# a full run renders every table and figure again: clear the old ones so none outlives the code that made it
[ "$QUICK" = 0 ] && [ -z "$ONLY" ] && rm -f figures/"$PROFILE"/*.{md,tex,png,pdf}
export PYTHONHASHSEED=0
[ "${DYNATREE_PAIRED:-0}" = 1 ] || \
  "$PY" -m jupytext --quiet --update --to ipynb notebooks/[0-9][0-9]_*.py  # the .py sources are the truth (--update keeps cell ids)
start=$(date +%s)
for nb in notebooks/[0-9][0-9]_*.ipynb; do
  name=$(basename "$nb")
  if [ -n "$ONLY" ] && [[ "$name" != "$ONLY"_* ]]; then continue; fi
  if [ "$QUICK" = 1 ] && [[ "$name" =~ ^0[567]_ ]]; then echo "[run_all] --quick: skipping $name"; continue; fi
  echo "[run_all] $(date +%H:%M:%S) $name (profile $PROFILE)"
  # papermill, its kernel's channels encrypted where jupyter_client can (no warning from ipykernel on each start),
  # then the executed notebook stripped of timestamps and stderr: an unchanged render changes no file
  if ! "$PY" -m dynatree_lib.reporting.executed papermill "$nb" "$OUT/$name" -p profile "$PROFILE" -p rerun "$RERUN" \
       -p render_only "$RENDER" -y "overrides: $OVERRIDES" --cwd notebooks --progress-bar --stdout-file /dev/null; then
    echo "[run_all] FAILED in $name; the executed notebook with the error is $OUT/$name" >&2
    exit 1
  fi
done
echo "[run_all] done in $(( $(date +%s) - start ))s: notebooks in $OUT, JSON in results/$PROFILE, figures in figures/$PROFILE"
"$PY" -m dynatree_lib.reporting.results_md "$PROFILE" && echo "[run_all] results summary: RESULTS.md"
if [ "$PROFILE" = cpu ]; then
  "$PY" -m dynatree_lib.reporting.scorecard cpu >/dev/null && echo "[run_all] README scorecard updated"
  "$PY" -m dynatree_lib.train.card >/dev/null && echo "[run_all] draft model card updated"
  "$PY" -m dynatree_lib.train.head_card >/dev/null && echo "[run_all] EAGLE-3 head card updated"
  "$PY" -m dynatree_lib.train.publish >/dev/null && echo "[run_all] Medusa and Hydra cards updated"
fi
