#!/usr/bin/env bash
# Installs (scripts/setup.sh) and runs the test suite. Extra arguments go to
# pytest, e.g. `bash scripts/test.sh -m slow` for the slow tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
exec .venv/bin/python -m pytest -q "$@"
