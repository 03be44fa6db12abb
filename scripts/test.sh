#!/usr/bin/env bash
# Installs (scripts/setup.sh) and runs the test suite on two pytest-xdist workers, one per core
# of the CI machine (measured on 2 cores: 18 min in one process, 12 min on two workers).
# Extra arguments go to pytest and override these: `bash scripts/test.sh -m slow` runs the
# slow tests, `-n 0` runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
# Many tests compile the same small programs, in this process and in the `performer`
# subprocesses they start: JAX's persistent compilation cache compiles each once per run.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$(mktemp -d)}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}"
exec .venv/bin/python -m pytest -q -n 2 --dist worksteal "$@"
