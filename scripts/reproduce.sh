#!/usr/bin/env bash
# Reproduces the paper's experiments on proteins end to end: data, Pfam labels for the OOD split,
# training runs, evals, probes of trained models, tables, figures and verdicts.
#   Fig. 6, Table 1, Table 2 (Sec. 4.3): the ten `fig6` runs, evaluated on test and OOD.
#   The appendix (issue 11): Fig. 5 backward compatibility (fine-tunes of the Fig. 6 Transformers),
#   Fig. 7 right (concatenated proteins), Fig. 15 (redrawing), Fig. 16 (kernels), and the probes
#   Fig. 2 (Lemma 2), Fig. 14 (error propagation), App. C.4 (attention maps, amino-acid similarity).
#
#   bash scripts/reproduce.sh [--budget tiny|mini|paper] [--only NAME[,NAME...]] [--steps N]
#                             [--jobs N] [--runs DIR] [--results DIR] [--data DATASET]
#                             [--gin_param B ...]
#
# Budgets:
#   mini   (default) real Swiss-Prot 2014_01 (scripts/get_swissprot.sh --debian), 2-layer models at
#          L = 256 (gin/reproduce/mini.gin); sized for a 2-core CPU (README.md gives the measured
#          times). Tables, figures and verdicts go to results/.
#   paper  the paper-size configs (36 layers, L = 1024; gin/trembl_*.gin), for a GPU/TPU cluster.
#          Same data unless --data names a prepared dataset (e.g. all of TrEMBL).
#   tiny   the sample proteome and a few steps per run: a check that everything connects.
# It resumes: finished runs, evals and probes are skipped, a killed run resumes from its
# checkpoint, so run the same command again after an interruption; a run that diverged (NaN,
# Fig. 16's point) is kept as it stopped. --only runs some experiments alone (a group name such as
# fig5 or probes stands for its members; fine-tunes and probes need the Fig. 6 runs they start
# from); the tables then cover every run folder present. --steps overrides every run's
# TrainConfig.steps, and --gin_param (repeatable) adds a gin binding to every run: e.g.
# --budget paper --steps 2 --gin_param DataConfig.batch_size=1 starts the paper configs on a
# CPU, whose memory holds no batch of 8 (train says how much a step needs before it starts).
# --jobs N runs N experiments at a time, each pinned to its share of the cores (taskset) and
# logged to RUNS/logs/NAME.log (default: 2 for tiny and mini, where two one-core processes train
# 1.45x faster than one on both of 2 cores; 1 for paper, whose runs want a whole machine).
# Environment: SWISSPROT_ROUTE=download fetches the current Swiss-Prot instead of 2014_01.
set -euo pipefail
cd "$(dirname "$0")/.."

budget=mini only="" steps="" jobs="" runs="" results="" data="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in --budget|--only|--steps|--jobs|--runs|--results|--data|--gin_param)
    [ $# -ge 2 ] && [ -n "$2" ] || { echo "error: $1 needs a value (see --help)" >&2; exit 2; } ;;
  esac
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --gin_param) extra+=(--gin_param "$2"); shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$budget" in tiny|mini|paper) ;; *) echo "error: --budget must be tiny, mini or paper, got $budget" >&2; exit 2 ;; esac
for pair in "steps:$steps" "jobs:$jobs"; do
  if [ -n "${pair#*:}" ] && ! [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: --${pair%%:*} must be a positive integer, got ${pair#*:}" >&2; exit 2
  fi
done
[ -n "$jobs" ] || { [ "$budget" = paper ] && jobs=1 || jobs=2; }
runs=${runs:-runs/reproduce/$budget}
if [ -z "$results" ]; then
  if [ "$budget" = mini ]; then results=results; else results=$runs/results; fi
fi
for folder in "$runs" "$results"; do  # before any work, not after hours of it
  mkdir -p "$folder" 2> /dev/null && [ -w "$folder" ] || {
    echo "error: cannot write to folder $folder (--runs / --results)" >&2; exit 2; }
done

# The experiments, by group (--only takes a group's name for all its members).
# fig6, Fig. 6 / Table 2: (U) Transformer, Performer-softmax, Performer-ReLU, Reformer; (B)
#   Transformer, Performer-softmax, Performer-ReLU, Linformer. A second seed of the two models
#   closest in an earlier measurement (Transformer and Performer-ReLU, (U): 11.1% each after 800
#   steps) measures the run-to-run spread that the verdicts compare differences with.
fig6=(u_exact u_performer_relu u_performer_softmax u_reformer
      b_exact b_performer_relu b_performer_softmax b_linformer
      u_exact_seed1 u_performer_relu_seed1)
# fig5, Fig. 5: the weights of fig6's Transformers fine-tuned as the Transformer itself
#   (continued), Performers with positive features redrawn / never redrawn, trig features, SMREG;
#   in (B) also Linformer.
#   On text too (the paper's Fig. 5 right is PG-19): the real sample book, whose Transformer
#   (fig5_text_source, the text budget's full length) is fine-tuned the same ways.
fig5=(fig5_u_exact fig5_u_positive fig5_u_no_redraw fig5_u_trig fig5_u_smreg
      fig5_b_exact fig5_b_positive fig5_b_linformer
      fig5_text_source fig5_text_exact fig5_text_positive fig5_text_no_redraw fig5_text_trig
      fig5_text_smreg)
# fig7, Fig. 7 right: concatenated proteins, small exact Transformers of 1, 2, 3 layers against
#   the Performer-ReLU at the budget's standard size.
fig7=(fig7_exact_1l fig7_exact_2l fig7_exact_3l fig7_performer_relu)
# fig15, Fig. 15: Performer-softmax redrawn and never redrawn, for two seeds of W (the feature
#   draw's seed, not the weights'); fig6's softmax and ReLU runs give its middle panel.
fig15=(fig15_redraw_f1 fig15_no_redraw_f1 fig15_redraw_f2 fig15_no_redraw_f2)
# fig16, Fig. 16 / D.3: (B) generalized attention with kernel f (trig is the paper's cosine).
fig16=(fig16_sigmoid fig16_exp fig16_relu fig16_abs fig16_gelu fig16_trig fig16_tanh
       fig16_identity)
# probes, no training: Fig. 2 (Lemma 2); Fig. 14 on fig6's Transformers; App. C.4 on fig6's (B)
#   Performer-softmax.
probes=(lemma2 error_propagation attention_maps aa_similarity)
groups=(fig6 fig5 fig7 fig15 fig16 probes)
experiments=("${fig6[@]}" "${fig5[@]}" "${fig7[@]}" "${fig15[@]}" "${fig16[@]}" "${probes[@]}")
chosen=()
if [ -n "$only" ]; then IFS=, read -r -a names <<< "$only"; else names=("${groups[@]}"); fi
for name in "${names[@]}"; do
  if [[ " ${groups[*]} " == *" $name "* ]]; then
    eval "chosen+=(\"\${${name}[@]}\")"  # a group's members; $name is one of the groups
  elif [[ " ${experiments[*]} " == *" $name "* ]]; then
    chosen+=("$name")
  else
    echo "error: no experiment $name; choose from the groups ${groups[*]} or: ${experiments[*]}" >&2
    exit 2
  fi
done

[ -x .venv/bin/performer ] || bash scripts/setup.sh
.venv/bin/python -c "import pyhmmer" 2> /dev/null || .venv/bin/python -m pip install --quiet -e '.[labels]'
if [ -n "$data" ] && ! .venv/bin/python - "$data" 2> /dev/null <<'PY'
import json, sys
stats = json.load(open(sys.argv[1] + "/stats.json"))
sys.exit(0 if stats["single"]["ood"]["count"] > 0 else 1)
PY
then
  echo "error: --data $data is not a prepare-trembl dataset with an OOD split (prepare it with" \
       "--families; see data/README.md)" >&2
  exit 2
fi
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
# Every run and eval is a new process compiling much the same programs: JAX's persistent
# compilation cache keeps them (an eval of the tiny budget: 16 s without, 7 s with).
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$runs/jax_cache}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0}"
performer=.venv/bin/performer
say() { echo "[reproduce $budget $(date +%H:%M:%S)] $*"; }

# Each step runs in the background and is waited for, so that a SIGTERM or Ctrl-C given to
# this script reaches it: train then saves a checkpoint after its step, and a re-run resumes.
child="" pin=()  # pin: a job's `taskset -c CORES`, when --jobs shares the cores out
trap '[ -z "$child" ] || kill -TERM "$child" 2> /dev/null' TERM INT
run() {
  ${pin[@]+"${pin[@]}"} "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  while kill -0 "$child" 2> /dev/null; do wait "$child" || rc=$?; done  # a trap ended the wait
  child=""
  [ "$rc" -eq 0 ] || { [ -n "${diverged:-}" ] && [ -f "$diverged" ]; } || {
    say "stopped: $1 ${2:-} exited with status $rc; run the same command to resume"; exit "$rc"; }
}

# --- data: FASTA -> Pfam labels -> prepared dataset with an OOD split of held-out families ---
if [ -n "$data" ]; then
  :  # checked above
elif [ "$budget" = tiny ]; then
  data=$runs/data/sample
  if [ ! -f "$data/stats.json" ]; then
    fasta=$(.venv/bin/python -c "from performer.data import samples; print(samples.fetch('protein'))")
    say "labels: Pfam HMM search of the sample proteome"
    run $performer label-pfam "$fasta" --gecco --sample 300 --ood-fraction 0.05 --out "$runs/data/labels.tsv.gz"
    say "data: prepare-trembl"
    run $performer prepare-trembl "$fasta" --valid-fraction 0.05 --test-fraction 0.05 --families \
        "$runs/data/labels.tsv.gz" --ood-families "$(cat "$runs/data/labels.tsv.gz.held_out.txt")" \
        --out "$data" > /dev/null
  fi
else
  data=runs/data/swissprot
  if [ ! -f "$data/stats.json" ]; then
    fasta=runs/data/swissprot.fasta.gz
    route=--debian
    [ "${SWISSPROT_ROUTE:-debian}" = download ] && route=--download
    say "data: Swiss-Prot ($route)"
    run bash scripts/get_swissprot.sh "$fasta" $route
    say "labels: Pfam HMM search (survey of 20,000 sequences, then the held-out families in all)"
    run $performer label-pfam "$fasta" --gecco --out runs/data/swissprot-pfam/labels.tsv.gz
    say "data: prepare-trembl"
    run $performer prepare-trembl "$fasta" --families runs/data/swissprot-pfam/labels.tsv.gz \
        --ood-families "$(cat runs/data/swissprot-pfam/labels.tsv.gz.held_out.txt)" --out "$data" > /dev/null
  fi
fi

# --- text data for Fig. 5 on PG-19: the real sample book (the paper budget: a prepared PG-19) ---
text_data=runs/data/pg19
[ "$budget" = paper ] || text_data=runs/data/pg19-sample
[ "$budget" != tiny ] || text_data=$runs/data/pg19-sample
if [[ " ${chosen[*]} " == *" fig5_text_"* ]] && [ "$budget" != paper ] && [ ! -f "$text_data/stats.json" ]; then
  say "data: prepare-pg19 --sample"
  run $performer prepare-pg19 --sample --out "$text_data" > /dev/null
fi

# --- what each experiment trains: a paper config (gin/trembl_CONFIG.gin) and bindings ---
# Sizes of the attention itself, scaled with the model: m = 4 d_head as the paper's 256 at
# d_head = 64; Linformer k = 0.59 L as the paper's 600 at L = 1024. The appendix runs redraw W
# every `redraw` steps: at the mini budget the paper-size period, 1000, would never redraw in a
# 250-step fine-tune (fig6's runs keep the default and redraw once, at step 1000).
case "$budget" in
  mini) m=64 k=150 redraw=100 finetune=250 text_finetune=500 steps15=500 steps16=300 steps7=300
        concat="DataConfig.seq_len=1024 DataConfig.batch_size=4" ;;  # README: why L = 1024
  tiny) m=16 k=16 redraw=1 finetune=3 text_finetune=3 steps15=3 steps16=3 steps7=3 concat="DataConfig.seq_len=64" ;;
  paper) m=256 k=600 redraw=1000 finetune=20000 text_finetune=20000 steps15="" steps16="" steps7="" concat="" ;;
esac
spec() {  # experiment $1 -> CONFIG, then that experiment's own bindings (words without spaces)
  local f="'num_features':$m" r="'redraw_every':$redraw"
  opt() { echo "ModelConfig.attention_options={$1}"; }
  short() {  # a run of $1 steps (none: the config's): warm-up a tenth of it, validation every fifth
    [ -z "$1" ] || echo "TrainConfig.steps=$1 OptimConfig.warmup_steps=$(( $1 / 10 ))" \
                        "TrainConfig.eval_every=$(( $1 >= 5 ? $1 / 5 : 1 ))"
  }
  from() { echo "TrainConfig.init_from='$runs/$1' $(short "${2:-$finetune}")"; }  # Fig. 5: from $1
  local text="pg19_u_performer_softmax_from_exact $(from fig5_text_source "$text_finetune")"
  case "${1%_seed[0-9]}" in  # a second seed trains as the first (bindings() sets the seed)
    u_exact|b_exact) echo "${1%_seed[0-9]}" ;;
    [ub]_performer_*) echo "${1%_seed[0-9]} $(opt "$f")" ;;
    b_linformer) echo "$1 $(opt "'num_projections':$k")" ;;
    u_reformer) echo "$1 $([ "$budget" = tiny ] && opt "'chunk_size':8,'n_buckets':4")" ;;
    fig5_u_exact) echo "u_exact $(from u_exact)" ;;
    fig5_u_positive) echo "u_performer_softmax $(from u_exact) $(opt "$f,$r")" ;;
    fig5_u_no_redraw) echo "u_performer_softmax_no_redraw $(from u_exact) $(opt "$f,'redraw_every':0")" ;;
    fig5_u_trig) echo "u_performer_softmax $(from u_exact) $(opt "$f,$r,'kernel':'trig'")" ;;
    fig5_u_smreg) echo "u_performer_softmax $(from u_exact) $(opt "$f,$r,'scaling':'sqrt_d'")" ;;
    fig5_b_exact) echo "b_exact $(from b_exact)" ;;
    fig5_b_positive) echo "b_performer_softmax $(from b_exact) $(opt "$f,$r")" ;;
    fig5_b_linformer) echo "b_linformer $(from b_exact) $(opt "'num_projections':$k")" ;;
    fig5_text_source) echo "pg19_u_exact" ;;
    fig5_text_exact) echo "pg19_u_exact $(from fig5_text_source "$text_finetune")" ;;
    fig5_text_positive) echo "$text $(opt "$f,$r")" ;;
    fig5_text_no_redraw) echo "$text $(opt "$f,'redraw_every':0")" ;;
    fig5_text_trig) echo "$text $(opt "$f,$r,'kernel':'trig'")" ;;
    fig5_text_smreg) echo "$text $(opt "$f,$r,'scaling':'sqrt_d'")" ;;
    fig7_exact_?l)  # the paper's small Transformers, (8 heads, d 256, d_ff 256), over mini's sizes
      echo "concat_u_${1#fig7_} $concat $(short "$steps7") ModelConfig.num_layers=${1:11:1}" \
           "ModelConfig.num_heads=8 ModelConfig.d_model=256 ModelConfig.d_ff=256" ;;
    fig7_performer_relu) echo "concat_u_performer_relu $concat $(short "$steps7") $(opt "$f")" ;;
    fig15_redraw_f*) echo "u_performer_softmax $(short "$steps15") $(opt "$f,$r,'seed':${1##*_f}")" ;;
    fig15_no_redraw_f*)
      echo "u_performer_softmax_no_redraw $(short "$steps15") $(opt "$f,'redraw_every':0,'seed':${1##*_f}")" ;;
    fig16_*) echo "b_performer_kernels $(short "$steps16") $(opt "$f,$r,'kernel':'${1#fig16_}'")" ;;
  esac
}
bindings() {  # the budget's gin files and the bindings of experiment $1, as train flags
  local words seed=0
  read -r -a words <<< "$(spec "$1")"
  [[ "$1" == *_seed[0-9] ]] && seed=${1##*_seed}
  if [[ "${words[0]}" == pg19_* ]]; then  # text: the sample book at the PG-19 twins' sizes
    echo "--gin gin/${words[0]}.gin"
    case "$budget" in
      tiny) echo "--gin gin/reproduce/tiny.gin" ;;
      mini) echo "--gin gin/mini/pg19_sizes.gin" ;;
    esac
    echo "--gin_param DataConfig.path='$text_data' --gin_param TrainConfig.seed=$seed"
  else
    echo "--gin gin/trembl_${words[0]}.gin"
    case "$budget" in
      tiny) echo "--gin gin/reproduce/tiny.gin" ;;
      mini) echo "--gin gin/reproduce/mini.gin" ;;
    esac
    echo "--gin_param DataConfig.path='$data' --gin_param TrainConfig.seed=$seed"
  fi
  for word in "${words[@]:1}"; do echo "--gin_param $word"; done
  [ -n "$steps" ] && echo "--gin_param TrainConfig.steps=$steps"
}

# --- probes of FAVOR and of trained runs: result files, skipped when newer than their runs ---
fresh() { [ -f "$1" ] && { [ -z "${2:-}" ] || [ "$1" -nt "$2/checkpoints" ]; }; }
probe() {
  local small=()
  case "$1" in
    lemma2)
      [ "$budget" = tiny ] && small=(--angles 8 --lengths 4 --slice-angles 6 --samples 500)
      fresh "$results/lemma2.json" || run $performer lemma2 "${small[@]}" --out "$results/lemma2.json" ;;
    error_propagation)
      [ "$budget" = tiny ] && small=(--sequences 4 --draws 2 --features 8,16 --init-layers 2)
      for direction in u b; do
        fresh "$results/error_propagation_$direction.json" "$runs/${direction}_exact" || run \
          $performer error-propagation --run "$runs/${direction}_exact" "${small[@]}" \
          --out "$results/error_propagation_$direction.json"
      done ;;
    attention_maps)
      local fasta=runs/data/swissprot.fasta.gz accession=P00974  # BPT1_BOVIN, as App. C.4
      if [ "$budget" = tiny ]; then
        fasta=$(.venv/bin/python -c "from performer.data import samples; print(samples.fetch('protein'))")
        # the first protein that fits the tiny L = 64 with its start and end tokens
        accession=$(zcat -f "$fasta" | awk '
          function fits() { if (!found && acc != "" && n <= 60) { print acc; found = 1 } }
          /^>/ { fits(); split(substr($1, 2), a, "|"); acc = a[2] != "" ? a[2] : a[1]; n = 0; next }
          { n += length($0) }
          END { fits() }')  # reads to the end: an early exit would be a SIGPIPE under pipefail
      fi
      fresh "$runs/probes/attention_maps.json" "$runs/b_performer_softmax" || run $performer \
        attention-maps --run "$runs/b_performer_softmax" --fasta "$fasta" --accession "$accession" \
        --out "$runs/probes/attention_maps.json" ;;
    aa_similarity)
      [ "$budget" = tiny ] && small=(--sequences 16)
      fresh "$results/aa_similarity.json" "$runs/b_performer_softmax" || run $performer \
        aa-similarity --run "$runs/b_performer_softmax" --data "$data" "${small[@]}" \
        --out "$results/aa_similarity.json" ;;
  esac
}

# --- one training run per experiment; fig6's are then evaluated on test and OOD ---
job() {  # experiment $1, tagged $2 in messages: its probe, or its training run (and fig6's evals)
  local name=$1 tag=$2 workdir=$runs/$1 todo=() split splits
  if [[ " ${probes[*]} " == *" $name "* ]]; then
    say "$tag $name"
    probe "$name"
    return
  fi
  if [ -f "$workdir/diverged.json" ]; then
    say "$tag $name: diverged in an earlier run ($workdir/diverged.json); kept as it stopped"
    return
  fi
  say "$tag $name: train ($workdir)"
  # shellcheck disable=SC2046  # the bindings are words on purpose
  diverged=$workdir/diverged.json run $performer train $(bindings "$name") \
    ${extra[@]+"${extra[@]}"} --workdir "$workdir"
  [[ " ${fig6[*]} " == *" $name "* ]] && [ ! -f "$workdir/diverged.json" ] || return 0
  for split in test ood; do  # skip a split evaluated since the last checkpoint
    [ "$workdir/eval_$split.json" -nt "$workdir/checkpoints" ] || todo+=("$split")
  done
  if [ ${#todo[@]} -gt 0 ]; then
    splits=$(IFS=,; echo "${todo[*]}")
    say "$tag $name: eval $splits"
    run $performer eval --workdir "$workdir" --split "$splits" > /dev/null
  fi
}
needs() {  # the experiments whose run folders experiment $1 starts from or probes
  case "$1" in
    fig5_u_*) echo u_exact ;;
    fig5_b_*) echo b_exact ;;
    fig5_text_source) ;;
    fig5_text_*) echo fig5_text_source ;;
    error_propagation) echo u_exact b_exact ;;
    attention_maps|aa_similarity) echo b_performer_softmax ;;
  esac
}
if [ "$jobs" -eq 1 ]; then
  i=0
  for name in "${chosen[@]}"; do i=$((i + 1)); job "$name" "[$i/${#chosen[@]}]"; done
else
  # Two waves: the experiments that read no other chosen one, then the rest. Each job runs in
  # a subshell with its own share of the cores; a SIGTERM or Ctrl-C reaches every job's train.
  first=() second=()
  for name in "${chosen[@]}"; do
    later=""
    for need in $(needs "$name"); do [[ " ${chosen[*]} " != *" $need "* ]] || later=1; done
    if [ -n "$later" ]; then second+=("$name"); else first+=("$name"); fi
  done
  cores=$(nproc 2> /dev/null || echo 1)
  share=$(( cores / jobs ))
  mkdir -p "$runs/logs"
  slots=() stopping="" failed="" i=0
  # Each level passes a signal on once: a second TERM would make train quit without saving.
  trap '[ -n "$stopping" ] || { stopping=1
    for pid in "${slots[@]}"; do [ -z "$pid" ] || kill -TERM "$pid" 2> /dev/null; done; }' TERM INT
  reap() {  # waits until fewer than $1 jobs run; a failed job stops new ones from starting
    local s rc busy
    while :; do
      busy=0
      for s in "${!slots[@]}"; do
        [ -n "${slots[$s]}" ] || continue
        if kill -0 "${slots[$s]}" 2> /dev/null; then busy=$((busy + 1)); continue; fi
        rc=0; wait "${slots[$s]}" || rc=$?
        if [ "$rc" -eq 0 ]; then say "${names[$s]}: finished"
        else failed="${names[$s]} (status $rc, log $runs/logs/${names[$s]}.log)"; fi
        slots[$s]=""
      done
      [ "$busy" -ge "$1" ] || return 0
      sleep 1
    done
  }
  names=()
  for wave in 1 2; do
    if [ "$wave" = 1 ]; then members=(${first[@]+"${first[@]}"}); else members=(${second[@]+"${second[@]}"}); fi
    for name in ${members[@]+"${members[@]}"}; do
      reap "$jobs"
      [ -z "$stopping$failed" ] || break 2
      i=$((i + 1))
      for s in $(seq 0 $((jobs - 1))); do [ -n "${slots[$s]:-}" ] || break; done
      pin=()
      if [ "$share" -ge 1 ] && command -v taskset > /dev/null; then
        lo=$((s * share)) hi=$((s * share + share - 1))
        pin=(taskset -c "$lo$([ "$hi" = "$lo" ] || echo "-$hi")")
      fi
      say "[$i/${#chosen[@]}] $name: started${pin[*]:+ on cpu ${pin[2]}} (log: $runs/logs/$name.log)"
      ( trap '[ -n "$child" ] || exit 130; [ -n "${sent:-}" ] || { sent=1; kill -TERM "$child"; }' TERM INT
        job "$name" "[$i/${#chosen[@]}]" ) > "$runs/logs/$name.log" 2>&1 &
      slots[$s]=$! names[$s]=$name
    done
    reap 1  # the second wave reads the first's runs
  done
  reap 1
  pin=()
  if [ -n "$stopping" ]; then say "interrupted: run the same command to resume"; exit 130; fi
  if [ -n "$failed" ]; then say "stopped: $failed; run the same command to resume"; exit 1; fi
fi

# --- tables, figures and verdicts, from run folders and result files alone ---
present() {  # the run folders of experiments "$@" that have trained (or diverged)
  for name in "$@"; do [ -f "$runs/$name/metrics.jsonl" ] && echo "$runs/$name"; done; true
}
say "figures -> $results/"
evaluated=()
for name in "${fig6[@]}"; do [ -f "$runs/$name/eval_test.json" ] && evaluated+=("$runs/$name"); done
if [ ${#evaluated[@]} -gt 0 ]; then
  $performer figure table1 --input "$data" --out "$results/table1.md"
  $performer figure table2 --runs "${evaluated[@]}" --out "$results/table2.md"
  $performer figure claims --runs "${evaluated[@]}" --out "$results/claims.md"
  for metric in accuracy perplexity; do
    $performer figure curves --runs "${evaluated[@]}" --metric $metric --out "$results/fig6_$metric.png"
  done
fi
mapfile -t done5 < <(present "${fig5[@]/fig5_text_source}")  # the fine-tunes, not their source
[ ${#done5[@]} -eq 0 ] || $performer figure backward-compat --runs "${done5[@]}" \
  --out "$results/fig5_backward_compat.png"
mapfile -t done7 < <(present "${fig7[@]}")
[ ${#done7[@]} -eq 0 ] || $performer figure curves --runs "${done7[@]}" --metric accuracy \
  --out "$results/fig7_concat_accuracy.png"
mapfile -t done15 < <(present "${fig15[@]}" u_performer_softmax u_performer_relu)
[ ${#done15[@]} -le 2 ] || $performer figure redraw --runs "${done15[@]}" --out "$results/fig15_redraw.png"
mapfile -t done16 < <(present "${fig16[@]}")
[ ${#done16[@]} -eq 0 ] || $performer figure kernels --runs "${done16[@]}" --out "$results/fig16_kernels.png"
[ ! -f "$results/lemma2.json" ] || $performer figure lemma2 --input "$results/lemma2.json" \
  --out "$results/fig2_lemma2.png"
for direction in u b; do
  [ ! -f "$results/error_propagation_$direction.json" ] || $performer figure error-propagation \
    --input "$results/error_propagation_$direction.json" --out "$results/fig14_error_propagation_$direction.png"
done
[ ! -f "$runs/probes/attention_maps.json" ] || $performer figure attention-maps \
  --input "$runs/probes/attention_maps.json" --out "$results/fig10_attention_maps.png"
[ ! -f "$results/aa_similarity.json" ] || $performer figure aa-similarity \
  --input "$results/aa_similarity.json" --out "$results/fig13_aa_similarity.png"
say "done: figures and tables in $results/"
