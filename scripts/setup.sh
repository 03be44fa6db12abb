#!/usr/bin/env bash
# Creates .venv (once) and installs performer with its test extra into it.
# Needs only Python >= 3.11 with pip; packages come from PyPI. Set PYTHON to
# choose the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet -e '.[test]'
