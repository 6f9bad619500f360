#!/usr/bin/env bash
# What a newcomer gets: clone the checkout's HEAD commit into a temporary folder, hide the optional tools (no
# llama.cpp build), then
#   1. render the cpu profile from the committed JSON (./run_all.sh --render) and fail if the render changes any
#      file in the tree (git status), or if an executed notebook differs from the committed one
#      (dynatree_lib.reporting.executed.compare);
#   2. run the dry-run profiles as a newcomer types them (./run_all.sh paper-dryrun, ./run_all.sh authors-dryrun):
#      their committed JSON holds every cell, so nothing is measured and, as in 1, nothing committed changes;
#   3. measure the smoke profile from scratch (./run_all.sh smoke --rerun, shrunk by SMOKE_SETS to a few prompts
#      and tokens: what proves that every notebook measures, renders and compares), which must pass.
# The notebooks are paired once, then two lanes run side by side (cpu, paper-dryrun | smoke, authors-dryrun): each
# profile writes only its own folders, and none of these runs times anything that a table claims.
# .ci/run calls it after the tests.   Usage: tools/clean_render.sh [--render-only]   (1 and 2 only)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/clone"
cd "$WORK/clone"
export PYTHONPATH="$PWD"
PY=${PYTHON:-python3}
RENDER_ONLY=$([ "${1:-}" = "--render-only" ] && echo 1 || echo 0)
SMOKE_SETS=(--set replicates=1 --set T=12 --set "workloads=('wikitext2', 'spec_bench')")
echo "[clean_render] fresh clone of $(git rev-parse --short HEAD) in $WORK/clone"
mkdir -p "$WORK/no-llamacpp"
export DYNATREE_LLAMACPP="$WORK/no-llamacpp"  # an empty folder: llama.cpp is not built here
unset DYNATREE_DATA

unchanged() {  # profile: the render changed no file in the tree, and the executed notebooks equal the committed ones
  local profile=$1 changed status=0
  # the whole tree, but for the other profiles' folders: the other lane writes those meanwhile and checks them itself
  local shared=(. ":(exclude)executed" ":(exclude)results" ":(exclude)figures")
  local own=("executed/$profile" "results/$profile" "figures/$profile" "results/$profile@*" "figures/$profile@*")
  changed=$(git status --porcelain -- "${shared[@]}"; git status --porcelain -- "${own[@]}")
  if [ -n "$changed" ]; then
    echo "[clean_render] FAILED: ./run_all.sh $profile on the committed JSON left the tree changed (git status):" >&2
    echo "$changed" >&2
    git --no-pager diff --stat -- "${shared[@]}" >&2
    git --no-pager diff --stat -- "${own[@]}" >&2
    return 1
  fi
  for nb in executed/"$profile"/*.ipynb; do
    git show "HEAD:$nb" > "$WORK/committed-$profile.ipynb"
    "$PY" -m dynatree_lib.reporting.executed compare "$WORK/committed-$profile.ipynb" "$nb" >&2 \
      || { echo "[clean_render] FAILED: $nb renders differently from the committed one (above)" >&2; status=1; }
  done
  [ "$status" = 0 ] && echo "[clean_render] $profile: the render equals what is committed"
  return "$status"
}

rendered() {  # profile [run_all options]: run it, then check that nothing committed changed
  local profile=$1
  shift
  ./run_all.sh "$profile" "$@" && unchanged "$profile"
}

lane() {  # name command...: run the command, every line of its output tagged with the lane's name
  local name=$1
  shift
  "$@" > >(sed -u "s/^/[$name] /") 2>&1
}

bash setup.sh
"$PY" -m jupytext --quiet --update --to ipynb notebooks/[0-9][0-9]_*.py
export DYNATREE_PAIRED=1
start=$(date +%s)
first() { rendered cpu --render && rendered paper-dryrun; }
if [ "$RENDER_ONLY" = 1 ]; then
  second() { rendered authors-dryrun; }
else
  second() {
    ./run_all.sh smoke --rerun "${SMOKE_SETS[@]}" && echo "[clean_render] smoke: measured and rendered from scratch" \
      && rendered authors-dryrun
  }
fi
lane cpu first & a=$!
lane smoke second & b=$!
status=0
wait "$a" || status=1
wait "$b" || status=1
echo "[clean_render] done in $(( $(date +%s) - start ))s"
exit "$status"
