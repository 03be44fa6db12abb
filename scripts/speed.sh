#!/usr/bin/env bash
# Reproduces the speed results in results/ (see results/pages/speed_cpu.md):
#   bash scripts/speed.sh [TAG] [TIME_CAP]
# TAG names the files (default cpu): results/speed_{regular,small,regular_long,layer,chunks,targets,peers}_TAG.json
# and a figure for each sweep. TIME_CAP is seconds per configuration (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-cpu}
cap=${2:-30}
performer=.venv/bin/performer
[ -x "$performer" ] || performer=performer
python=.venv/bin/python
[ -x "$python" ] || python=python3

for config in regular small; do
  $performer speed --config "$config" --repeats 3 --time-cap "$cap" \
      --out "results/speed_${config}_${tag}.json"
  $performer figure speed --input "results/speed_${config}_${tag}.json" \
      --out "results/speed_${config}_${tag}.png"
done
# Fig. 3's curves, regular model fwd+bwd, with three times the cap: how far each attention reaches.
$performer speed --config regular --attention exact,performer_softmax,identity --mode fwdbwd \
    --repeats 3 --time-cap "$(( ${cap%.*} * 3 ))" --out "results/speed_regular_long_${tag}.json"
$performer figure speed --input "results/speed_regular_long_${tag}.json" \
    --out "results/speed_regular_long_${tag}.png"
$performer speed --layer-only \
    --attention exact,exact_blockwise,exact_dot_product,performer_softmax,performer_favorpp,performer_favorsharp,identity,favor_scan \
    --mode fwdbwd --repeats 3 --time-cap "$cap" --out "results/speed_layer_${tag}.json"
$performer figure speed --input "results/speed_layer_${tag}.json" --out "results/speed_layer_${tag}.png"
$performer speed --layer-only --attention performer_softmax --mode fwdbwd --seq-lens 8192 \
    --chunk-sizes 32,64,128,256,512,1024 --repeats 5 --out "results/speed_chunks_${tag}.json"
$performer figure speed --input "results/speed_chunks_${tag}.json" --out "results/speed_chunks_${tag}.png"
$performer speed --targets --repeats 5 --out "results/speed_targets_${tag}.json"
# performer-pytorch beside ours (the peers extra; skipped with a note when it is not installed).
if "$python" -c "import torch, performer_pytorch" 2> /dev/null; then
  $performer speed --layer-only --peers --attention performer_softmax --mode fwd,fwdbwd \
      --seq-lens 1024,2048,4096,8192,16384 --repeats 3 --time-cap "$cap" \
      --out "results/speed_peers_${tag}.json"
  $performer figure speed --input "results/speed_peers_${tag}.json" \
      --out "results/speed_peers_${tag}.png"
else
  echo "performer-pytorch comparison skipped: install the peers extra (docs/speed.md)"
fi
