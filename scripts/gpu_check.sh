#!/usr/bin/env bash
# The GPU measurement, ready to start on a machine with an NVIDIA GPU (README.md: Speed):
#   bash scripts/gpu_check.sh            # about 8 minutes; writes results/*_gpu.json and figures
#   bash scripts/gpu_check.sh --tiny     # the same steps at toy sizes on any machine (a test)
# It uses the JAX already installed when it sees the GPU (GPU machines are often offline);
# otherwise, online, it installs jax[cuda12]. The project's own missing packages come from
# $WHEELS (a folder of wheels: `pip download -d wheels grain sentencepiece gin-config
# tensorboardX tqdm matplotlib` on a machine with the internet) or from PyPI.
# Environment: OUT (results folder; default results/, --tiny: runs/gpu_check_tiny),
# DATA (a prepare-trembl dataset for the training throughput; default the sample proteome,
# prepared when absent, which needs PyPI or a prepared copy carried along).
set -euo pipefail
cd "$(dirname "$0")/.."
tiny=0
case "${1:-}" in
  --tiny) tiny=1 ;;
  "") ;;
  *) echo "usage: bash scripts/gpu_check.sh [--tiny]" >&2; exit 2 ;;
esac
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
start=$(date +%s)

if [ "$tiny" = 0 ]; then
  unset JAX_PLATFORMS
  if ! "$python" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
    echo "no CUDA-enabled JAX here: installing jax[cuda12] (needs PyPI)"
    "$python" -m pip install --quiet "jax[cuda12]"
  fi
  "$python" -m pip install --quiet --no-deps --no-build-isolation -e . 2>/dev/null \
    || "$python" -m pip install --quiet --no-deps -e .
  for module_package in grain:grain sentencepiece:sentencepiece gin:gin-config \
      tensorboardX:tensorboardX tqdm:tqdm matplotlib:matplotlib optax:optax orbax.checkpoint:orbax-checkpoint; do
    module=${module_package%%:*} package=${module_package#*:}
    "$python" -c "import $module" 2>/dev/null && continue
    if [ -n "${WHEELS:-}" ]; then
      "$python" -m pip install --quiet --no-index --find-links "$WHEELS" "$package"
    else
      "$python" -m pip install --quiet "$package"
    fi
  done
  out=${OUT:-results} tag=gpu platform=gpu
  lengths_layer=4096,16384,65536,262144 lengths_model=2048,8192,32768
  config=regular repeats=5 cap=30 share=85 targets_share=110 steps=300
else
  export JAX_PLATFORMS=cpu
  out=${OUT:-runs/gpu_check_tiny} tag=tiny platform=cpu
  lengths_layer=16,32 lengths_model=16 config=small repeats=1 cap=60 share=900 targets_share=0
  steps=20
fi
performer="$python -m performer.cli"
data=${DATA:-runs/data/trembl-sample}
mkdir -p "$out"
device=$("$python" -c "import jax; d = jax.devices()[0]; print(f'{d.platform}: {d.device_kind} (jax {jax.__version__})')")
echo "device: $device"

# Fig. 3's layer sweep: FAVOR+ against naive exact and jax.nn.dot_product_attention (cuDNN flash
# attention on the GPU in bfloat16), both directions, float32 and bfloat16, until memory runs out.
for dtype in float32 bfloat16; do
  $performer speed --layer-only --config "$config" \
      --attention exact,exact_dot_product,performer_softmax --mode fwdbwd \
      --seq-lens "$lengths_layer" --dtype "$dtype" --repeats "$repeats" --time-cap "$cap" \
      --deadline "$share" --out "$out/speed_layer_${dtype}_${tag}.json"
  $performer figure speed --input "$out/speed_layer_${dtype}_${tag}.json" \
      --out "$out/speed_layer_${dtype}_${tag}.png"
done
# The whole model, in bfloat16 (what a GPU user trains in).
$performer speed --config "$config" \
    --attention exact,exact_dot_product,performer_softmax,identity --mode fwdbwd \
    --seq-lens "$lengths_model" --dtype bfloat16 --repeats "$repeats" --time-cap "$cap" \
    --deadline "$share" --out "$out/speed_model_bfloat16_${tag}.json"
$performer figure speed --input "$out/speed_model_bfloat16_${tag}.json" \
    --out "$out/speed_model_bfloat16_${tag}.png"
# The target ratios (tiny: the plan only, every row skipped).
$performer speed --targets --repeats "$repeats" --time-cap "$cap" --deadline "$targets_share" \
    --out "$out/speed_targets_${tag}.json"
# A mini training run's throughput (the quick start's model), the loop against its compiled step.
if [ ! -e "$data/manifest.json" ]; then
  $performer prepare-trembl --sample --out "$data"
fi
$performer throughput --gin gin/mini/trembl_u_performer_relu.gin \
    --gin_param "DataConfig.path='$data'" --devices 1 --steps "$steps" --log-every 10 \
    --platform "$platform" --out "$out/throughput_${tag}.json"
echo "device: $device; done in $(( $(date +%s) - start )) s; outputs in $out/"
