#!/usr/bin/env bash
# The main job, end to end on this machine: install, prepare the real sample
# proteome, train a small unidirectional (U) Performer-ReLU on the CPU for a
# few minutes, evaluate it on the test split and compare it with the
# empirical amino-acid frequency baseline of the paper's Table 2.
# Everything lands in runs/quickstart/ (data in runs/data/trembl-sample/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
run=runs/quickstart/trembl_u_performer_relu
.venv/bin/performer prepare-trembl --sample --out runs/data/trembl-sample
.venv/bin/performer train --gin gin/mini/trembl_u_performer_relu.gin --workdir "$run"
.venv/bin/performer eval --workdir "$run" --split test > /dev/null
.venv/bin/python - "$run/eval_test.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"test (step {r['step']}, {r['tokens']} tokens): accuracy {100 * r['accuracy']:.2f}% "
      f"vs baseline {100 * r['baseline_accuracy']:.2f}%; perplexity {r['perplexity']:.2f} "
      f"vs baseline {r['baseline_perplexity']:.2f}")
beats = r["accuracy"] > r["baseline_accuracy"] and r["perplexity"] < r["baseline_perplexity"]
print("the model beats the empirical-frequency baseline" if beats else
      "WARNING: the model does not beat the empirical-frequency baseline")
sys.exit(0 if beats else 1)
PY
echo "outputs: $run/ (tensorboard/, metrics.jsonl, checkpoints/, config.gin, eval_test.json)"
