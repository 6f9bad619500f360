#!/usr/bin/env bash
# What a newcomer gets: clone the checkout's HEAD commit into a temporary folder, hide the optional tools (no
# llama.cpp build), then
#   1. render the cpu profile from the committed JSON (./run_all.sh --render) and fail if README.md, RESULTS.md,
#      figures/ or weights/ change, or if an executed notebook differs from the committed one in more than its
#      machine's description (dynatree_lib.reporting.executed.compare);
#   2. run the dry-run profiles as a newcomer types them (./run_all.sh paper-dryrun, ./run_all.sh authors-dryrun):
#      their committed JSON holds every cell, so nothing is measured and, as in 1, nothing committed changes;
#   3. measure the smoke profile from scratch (./run_all.sh smoke --rerun), which must pass: every notebook's
#      measuring path on tiny models.
# .ci/run calls it after the tests.   Usage: tools/clean_render.sh [--render-only]   (1 and 2 only)
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

unchanged() {  # profile: nothing committed changed, and the executed notebooks equal the committed ones
  local profile=$1 changed status=0
  changed=$(git status --porcelain -- README.md RESULTS.md weights "figures/$profile" "results/$profile")
  if [ -n "$changed" ]; then
    echo "[clean_render] FAILED: ./run_all.sh $profile on the committed JSON changed committed files:" >&2
    echo "$changed" >&2
    git --no-pager diff --stat -- README.md RESULTS.md weights "figures/$profile" "results/$profile" >&2
    return 1
  fi
  for nb in executed/"$profile"/*.ipynb; do
    git show "HEAD:$nb" > "$WORK/committed.ipynb"
    "$PY" -m dynatree_lib.reporting.executed compare "$WORK/committed.ipynb" "$nb" >&2 \
      || { echo "[clean_render] FAILED: $nb renders differently from the committed one (above)" >&2; status=1; }
  done
  [ "$status" = 0 ] && echo "[clean_render] $profile: the render equals what is committed"
  return "$status"
}

./run_all.sh --render
unchanged cpu
for profile in paper-dryrun authors-dryrun; do
  ./run_all.sh "$profile"
  unchanged "$profile"
done
[ "${1:-}" = "--render-only" ] && exit 0
./run_all.sh smoke --rerun
echo "[clean_render] smoke: measured and rendered from scratch"
