#!/usr/bin/env bash
# Creates .venv (once) and installs performer with its test extra into it, at the exact versions
# of requirements.lock (what results/ was made with; README.md, "Tests", says how to update it).
# Needs only Python >= 3.11 with pip; packages come from PyPI. Set PYTHON to choose the
# interpreter, PERFORMER_UNPINNED=1 to take the newest versions pyproject.toml allows instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
pins=(-c requirements.lock)
[ -z "${PERFORMER_UNPINNED:-}" ] || pins=()
.venv/bin/python -m pip install --quiet "${pins[@]}" -e '.[test]'
