#!/usr/bin/env bash
# The GPU measurement, ready to start on a machine with an NVIDIA GPU (docs/speed.md):
#   bash scripts/gpu_check.sh            # about 8 minutes; writes results/gpu_forms/*_gpu.json and figures
#   bash scripts/gpu_check.sh --tiny     # the same steps at toy sizes on any machine (a test)
# The project runs from this tree (PYTHONPATH, nothing installed) on the JAX already
# installed when it sees the GPU (GPU machines are often offline); otherwise, online, it
# installs jax[cuda12]. The project's own missing packages come from $WHEELS (a folder of
# wheels, installed as they are with pip --no-deps: `pip download --no-deps -d wheels grain
# array-record portpicker gin-config tensorboardX isal` for the GPU machine's Python, on a
# machine with the internet) or from PyPI.
# Environment: OUT (results folder; default results/gpu_forms/, --tiny: runs/gpu_check_tiny),
# DATA (a prepare-trembl dataset for the training throughput; default the sample proteome,
# prepared when absent, which needs PyPI: carry a prepared copy to an offline machine).
# A step that fails is reported and the others still run; the exit status says if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
tiny=0
case "${1:-}" in
  --tiny) tiny=1 ;;
  "") ;;
  *) echo "usage: bash scripts/gpu_check.sh [--tiny]" >&2; exit 2 ;;
esac
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)

if [ "$tiny" = 0 ]; then
  unset JAX_PLATFORMS
  if ! "$python" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
    echo "no CUDA-enabled JAX here: installing jax[cuda12] (needs PyPI)"
    "$python" -m pip install --quiet "jax[cuda12]" || exit 1
  fi
  missing=()
  for module_package in flax:flax optax:optax orbax.checkpoint:orbax-checkpoint grain:grain \
      sentencepiece:sentencepiece gin:gin-config tensorboardX:tensorboardX tqdm:tqdm \
      matplotlib:matplotlib isal:isal; do
    "$python" -c "import ${module_package%%:*}" 2>/dev/null || missing+=("${module_package#*:}")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing the missing ${missing[*]}"
    if [ -n "${WHEELS:-}" ]; then
      "$python" -m pip install --quiet --no-index --no-deps "$WHEELS"/*.whl || exit 1
    else
      "$python" -m pip install --quiet "${missing[@]}" || exit 1
    fi
  fi
  out=${OUT:-results/gpu_forms} tag=gpu platform=gpu
  lengths_layer=4096,16384,65536,262144 lengths_model=2048,8192,32768
  blocks=8192,65536,262144 blocks_len=262144 chunks=32,64,128 spans=4096,16384,65536 chunks_len=65536
  # Configurations are prepared 4 at a time (process start, imports, inputs) and compiled and
  # timed one at a time (speed --jobs). On an H200 (2026-12-04) compiling took 1-7 s per
  # layer and 8-22 s per model configuration, most of the wall time: the shares below (s after
  # which a sweep starts nothing new) fit the whole script into about 9 minutes (511 s in the
  # second run, before the depth sweep's 45 s); the targets are the CPU's: here only their plan is written.
  config=regular repeats=5 cap=60 jobs=4 steps=200
  share_bf16=60 share_f32=30 share_blocks=25 share_chunks=30 share_model=50 share_targets=0
  layers=1,2,4,8,12,16,20 layers_len=8192 share_layers=45
  lengths_fused=1024,4096,16384,65536,262144 model_fused=8192 share_fused=60 share_fused_model=30
  fused_tests=test_  # all
else
  export JAX_PLATFORMS=cpu
  out=${OUT:-runs/gpu_check_tiny} tag=tiny platform=cpu
  lengths_layer=16,32 lengths_model=16 blocks=8,16 blocks_len=32 chunks=8,16 spans=16,32 chunks_len=32
  config=small repeats=1 cap=240 jobs=2 steps=20  # cap: a loaded CI machine compiles slowly
  share_bf16=900 share_f32=900 share_blocks=900 share_chunks=900 share_model=900 share_targets=0
  layers=1,2 layers_len=16 share_layers=900
  lengths_fused=16 model_fused=16 share_fused=900 share_fused_model=900
  fused_tests=oracle  # interpret mode is slow: the causal kernel against the per-token oracle
fi
performer="$python -m performer.cli"
data=${DATA:-runs/data/trembl-sample}
mkdir -p "$out"
device=$("$python" -c "import jax; d = jax.devices()[0]; print(f'{d.platform}: {d.device_kind} (jax {jax.__version__})')") \
  || { echo "jax does not start here" >&2; exit 1; }
echo "device: $device"
failed=()
step() {  # step NAME COMMAND...: runs it, and on failure says so and goes on
  echo "== $1 ($(( $(date +%s) - start )) s)"
  local name=$1
  shift
  "$@" || { echo "step failed: $name" >&2; failed+=("$name"); return 1; }
}

sweep() {  # sweep NAME SHARE ARGS...: one `performer speed` run into $out/speed_NAME_$tag.json
  local name=$1 share=$2
  shift 2
  step "$name" $performer speed --repeats "$repeats" --time-cap "$cap" --jobs "$jobs" \
      --deadline "$share" --out "$out/speed_${name}_${tag}.json" "$@"
}
# Fig. 3's layer sweep: FAVOR+ against jax.nn.dot_product_attention (cuDNN flash attention on
# the GPU in bfloat16) and naive exact, both directions, until memory runs out; in float32,
# where jax.nn.dot_product_attention is XLA's naive composition, against naive exact only.
sweep layer_bfloat16 "$share_bf16" --layer-only --config "$config" --dtype bfloat16 \
    --attention performer_softmax,exact_dot_product,exact --mode fwdbwd --seq-lens "$lengths_layer"
sweep layer_float32 "$share_f32" --layer-only --config "$config" --dtype float32 \
    --attention performer_softmax,exact --mode fwdbwd --seq-lens "$lengths_layer"
# FAVOR+'s forms (favor.FORMS): the bidirectional block length (the whole sequence: no loop),
# and the causal chunk length against the span computed at once per loop step.
sweep blocks_bfloat16 "$share_blocks" --layer-only --config "$config" --dtype bfloat16 \
    --attention performer_softmax --direction bidirectional --mode fwdbwd \
    --seq-lens "$blocks_len" --chunk-sizes "$blocks"
sweep chunks_bfloat16 "$share_chunks" --layer-only --config "$config" --dtype bfloat16 \
    --attention performer_softmax --direction causal --mode fwdbwd \
    --seq-lens "$chunks_len" --chunk-sizes "$chunks" --spans "$spans"
# The whole model, in bfloat16 (what a GPU user trains in), with identity attention (OPT).
sweep model_bfloat16 "$share_model" --config "$config" --dtype bfloat16 \
    --attention performer_softmax,exact_dot_product,identity --mode fwdbwd \
    --seq-lens "$lengths_model"
# Figs. 18-19: the model's time and memory against its depth at one L, identity = X (OPT).
sweep layers_bfloat16 "$share_layers" --config "$config" --dtype bfloat16 \
    --attention performer_softmax,exact_dot_product,identity --mode fwdbwd \
    --seq-lens "$layers_len" --layers "$layers"
# The fused Pallas kernels (favor/fused.py) beside the XLA forms and cuDNN flash, the layer in
# both directions and the model: first their tests on this device (tiny: interpret mode on the
# CPU), and no timing of kernels that disagree with the references.
if step "fused kernel tests" timeout 300 "$python" -m pytest -q -x -p no:cacheprovider \
    tests/favor/test_fused.py -k "$fused_tests"; then
  sweep fused_bfloat16 "$share_fused" --layer-only --config "$config" --dtype bfloat16 \
      --attention performer_softmax,exact_dot_product --mode fwdbwd --seq-lens "$lengths_fused" \
      --fused on,off
  sweep fused_model_bfloat16 "$share_fused_model" --config "$config" --dtype bfloat16 \
      --attention performer_softmax,exact_dot_product --mode fwdbwd --seq-lens "$model_fused" \
      --fused on,off
fi
# The target ratios (tiny: the plan only, every row skipped).
sweep targets "$share_targets" --targets
# A mini training run's throughput (the quick start's model), the loop against its compiled step.
if [ ! -e "$data/manifest.json" ]; then
  step "prepare data" $performer prepare-trembl --sample --out "$data"
fi
step throughput $performer throughput --gin gin/mini/trembl_u_performer_relu.gin \
    --gin_param "DataConfig.path='$data'" --devices 1 --steps "$steps" --log-every 10 \
    --platform "$platform" --out "$out/throughput_${tag}.json"
# FAVOR's forms against their references on this device (exact path, no-leak, large norms).
[ "$tiny" = 0 ] && step "favor tests" timeout 90 "$python" -m pytest -q -x -p no:cacheprovider \
    tests/favor/test_attention.py -k "oracle or future or large_norm or loop or gradients"
for name in speed_layer_bfloat16 speed_layer_float32 speed_blocks_bfloat16 speed_chunks_bfloat16 \
    speed_model_bfloat16 speed_fused_bfloat16 speed_fused_model_bfloat16; do
  [ -e "$out/${name}_${tag}.json" ] && step "figure $name" $performer figure speed \
      --input "$out/${name}_${tag}.json" --out "$out/${name}_${tag}.png"
done
[ -e "$out/speed_layers_bfloat16_${tag}.json" ] && step "figure speed_layers_bfloat16" \
    $performer figure speed-layers --input "$out/speed_layers_bfloat16_${tag}.json" \
    --out "$out/speed_layers_bfloat16_${tag}.png"
echo "device: $device; done in $(( $(date +%s) - start )) s; outputs in $out/"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "failed steps: ${failed[*]}" >&2
  exit 1
fi
