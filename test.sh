#!/usr/bin/env bash
# The README's test command: set up, then run the tests and the notebook regression tests.
#   ./test.sh            the fast tier (minutes): every decoder's exactness on tiny models, sampling's power checks
#                        at reduced draws, bad input, structure, the records' schema, the smoke notebooks (nbval)
#   ./test.sh --full     everything (what CI runs): adds the tests marked full and the statistical tests' full draws
# Other arguments go to pytest (./test.sh tests/test_cli.py -x). The tests run in one worker per core (pytest-xdist);
# DYNATREE_TEST_WORKERS=N sets how many, 0 runs them in this process. What each tier covers: docs/usage.md#tests.
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in -h|--help) sed -n '2,7p' "$0"; exit 0 ;; esac
bash setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # kernels import the checkout even if the editable install is elsewhere
WORKERS=${DYNATREE_TEST_WORKERS:-auto}
PARALLEL=()
[ "$WORKERS" != 0 ] && PARALLEL=(-n "$WORKERS" --dist loadfile)  # a file's tests (a notebook's cells) stay together
exec "${PYTHON:-python3}" -m pytest "${PARALLEL[@]}" "$@"
