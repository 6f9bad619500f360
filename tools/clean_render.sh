#!/usr/bin/env bash
# What a newcomer gets: clone the checkout's HEAD commit into a temporary folder, hide the optional tools (no
# llama.cpp build), then
#   1. render the cpu profile from the committed JSON (./run_all.sh --render) and fail if README.md, RESULTS.md,
#      figures/ or weights/ change, or if an executed notebook differs from the committed one in more than its
#      machine's description (dynatree_lib.reporting.executed.render_diff);
#   2. run every profile that runs on a CPU from scratch (./run_all.sh <profile> --rerun: smoke, paper-dryrun,
#      authors-dryrun), which must pass.
# .ci/run calls it after the tests.   Usage: tools/clean_render.sh [--render-only]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/clone"
cd "$WORK/clone"
export PYTHONPATH="$PWD"
PY=${PYTHON:-python3}
echo "[clean_render] fresh clone of $(git rev-parse --short HEAD) in $WORK/clone"
mkdir -p "$WORK/no-llamacpp"
export DYNATREE_LLAMACPP="$WORK/no-llamacpp"  # an empty folder: llama.cpp is not built here
unset DYNATREE_DATA

./run_all.sh --render
changed=$(git status --porcelain -- README.md RESULTS.md figures weights)
if [ -n "$changed" ]; then
  echo "[clean_render] FAILED: rendering the committed JSON changed committed files:" >&2
  echo "$changed" >&2
  git --no-pager diff --stat -- README.md RESULTS.md figures weights >&2
  exit 1
fi
status=0
for nb in executed/cpu/*.ipynb; do
  git show "HEAD:$nb" > "$WORK/committed.ipynb"
  "$PY" -m dynatree_lib.reporting.executed compare "$WORK/committed.ipynb" "$nb" >&2 \
    || { echo "[clean_render] FAILED: $nb renders differently from the committed one (above)" >&2; status=1; }
done
[ "$status" = 0 ] || exit 1
echo "[clean_render] cpu: the render equals what is committed"

[ "${1:-}" = "--render-only" ] && exit 0
for profile in smoke paper-dryrun authors-dryrun; do
  ./run_all.sh "$profile" --rerun
  echo "[clean_render] $profile: measured and rendered from scratch"
done
