#!/usr/bin/env bash
# The main job, end to end on this machine: install, run the FAVOR+
# approximation-error experiment (paper Fig. 4) at a reduced size, and draw
# its figure. Outputs go to runs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
out=runs/quickstart
.venv/bin/performer approx-error --seq-len 1024 --samples 5 --out "$out/approx_error.json"
.venv/bin/performer figure mse-vs-m --input "$out/approx_error.json" --out "$out/mse_vs_m.png"
echo "quickstart done: $out/approx_error.json and $out/mse_vs_m.png"
