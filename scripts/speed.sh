#!/usr/bin/env bash
# Reproduces the speed results in results/ (see results/README.md):
#   bash scripts/speed.sh [TAG] [TIME_CAP]
# TAG names the files (default cpu): results/speed_{regular,small,layer,chunks,targets}_TAG.json
# and a figure for each sweep. TIME_CAP is seconds per configuration (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-cpu}
cap=${2:-30}
performer=.venv/bin/performer
[ -x "$performer" ] || performer=performer

for config in regular small; do
  $performer speed --config "$config" --repeats 3 --time-cap "$cap" \
      --out "results/speed_${config}_${tag}.json"
  $performer figure speed --input "results/speed_${config}_${tag}.json" \
      --out "results/speed_${config}_${tag}.png"
done
$performer speed --layer-only --attention exact,performer_softmax,identity,favor_scan \
    --mode fwdbwd --repeats 3 --time-cap "$cap" --out "results/speed_layer_${tag}.json"
$performer figure speed --input "results/speed_layer_${tag}.json" --out "results/speed_layer_${tag}.png"
$performer speed --layer-only --attention performer_softmax --mode fwdbwd --seq-lens 8192 \
    --chunk-sizes 32,64,128,256,512,1024 --repeats 5 --out "results/speed_chunks_${tag}.json"
$performer figure speed --input "results/speed_chunks_${tag}.json" --out "results/speed_chunks_${tag}.png"
$performer speed --targets --repeats 5 --out "results/speed_targets_${tag}.json"
