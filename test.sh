#!/usr/bin/env bash
# The README's test command: set up, then run the unit tests and the notebook regression tests.
set -euo pipefail
cd "$(dirname "$0")"
bash setup.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # kernels import the checkout even if the editable install is elsewhere
exec "${PYTHON:-python3}" -m pytest "$@"
