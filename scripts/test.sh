#!/usr/bin/env bash
# Installs (scripts/setup.sh) and runs the test suite. Extra arguments go to
# pytest, e.g. `bash scripts/test.sh -m slow` for the slow tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
# Many tests compile the same small programs, in this process and in the `performer`
# subprocesses they start: JAX's persistent compilation cache compiles each once per run.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$(mktemp -d)}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}"
exec .venv/bin/python -m pytest -q "$@"
