#!/usr/bin/env bash
# Reproduces the paper's protein experiments end to end (Sec. 4.3, Fig. 6, Table 1, Table 2):
# data, Pfam labels for the OOD split, training runs, evals on test and OOD, tables and figures.
#
#   bash scripts/reproduce.sh [--budget tiny|mini|paper] [--only NAME[,NAME...]] [--steps N]
#                             [--runs DIR] [--results DIR] [--data DATASET] [--gin_param B ...]
#
# Budgets:
#   mini   (default) real Swiss-Prot 2014_01 (scripts/get_swissprot.sh --debian), 2-layer models at
#          L = 256 (gin/reproduce/mini.gin); sized to fit 4 hours on a 2-core CPU (README.md gives the
#          measured time). Tables, figures and verdicts go to results/.
#   paper  the paper-size configs (36 layers, L = 1024; gin/trembl_*.gin), for a GPU/TPU cluster.
#          Same data unless --data names a prepared dataset (e.g. all of TrEMBL).
#   tiny   the sample proteome and a few steps per run: a check that everything connects.
# It resumes: finished runs and evals are skipped, a killed run resumes from its checkpoint, so
# run the same command again after an interruption. --only runs some experiments alone (their
# data first); the tables then cover every run folder present. --steps overrides every run's
# TrainConfig.steps, and --gin_param (repeatable) adds a gin binding to every run: e.g.
# --budget paper --steps 2 --gin_param DataConfig.batch_size=1 starts the paper configs on a
# CPU, whose memory holds no batch of 8 (train says how much a step needs before it starts).
# Environment: SWISSPROT_ROUTE=download fetches the current Swiss-Prot instead of 2014_01.
set -euo pipefail
cd "$(dirname "$0")/.."

budget=mini only="" steps="" runs="" results="" data="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in --budget|--only|--steps|--runs|--results|--data|--gin_param)
    [ $# -ge 2 ] && [ -n "$2" ] || { echo "error: $1 needs a value (see --help)" >&2; exit 2; } ;;
  esac
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --gin_param) extra+=(--gin_param "$2"); shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$budget" in tiny|mini|paper) ;; *) echo "error: --budget must be tiny, mini or paper, got $budget" >&2; exit 2 ;; esac
if [ -n "$steps" ] && ! [[ "$steps" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --steps must be a positive integer, got $steps" >&2; exit 2
fi
runs=${runs:-runs/reproduce/$budget}
if [ -z "$results" ]; then
  if [ "$budget" = mini ]; then results=results; else results=$runs/results; fi
fi
for folder in "$runs" "$results"; do  # before any work, not after hours of it
  mkdir -p "$folder" 2> /dev/null && [ -w "$folder" ] || {
    echo "error: cannot write to folder $folder (--runs / --results)" >&2; exit 2; }
done

# The experiments of Fig. 6 / Table 2: (U) Transformer, Performer-softmax, Performer-ReLU,
# Reformer; (B) Transformer, Performer-softmax, Performer-ReLU, Linformer. A second seed of the
# two models closest in an earlier measurement (Transformer and Performer-ReLU, (U): 11.1% each
# after 800 steps) measures the run-to-run spread that the verdicts compare differences with.
experiments=(u_exact u_performer_relu u_performer_softmax u_reformer
             b_exact b_performer_relu b_performer_softmax b_linformer
             u_exact_seed1 u_performer_relu_seed1)
if [ -n "$only" ]; then
  IFS=, read -r -a chosen <<< "$only"
  for name in "${chosen[@]}"; do
    [[ " ${experiments[*]} " == *" $name "* ]] || {
      echo "error: no experiment $name; choose from: ${experiments[*]}" >&2; exit 2; }
  done
else
  chosen=("${experiments[@]}")
fi

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
child=""
trap '[ -z "$child" ] || kill -TERM "$child" 2> /dev/null' TERM INT
run() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  while kill -0 "$child" 2> /dev/null; do wait "$child" || rc=$?; done  # a trap ended the wait
  child=""
  [ "$rc" -eq 0 ] || { say "stopped: $1 ${2:-} exited with status $rc; run the same command to resume"; exit "$rc"; }
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

# --- one training run per experiment, then its evals on test and OOD ---
bindings() {  # the budget's gin files and bindings of experiment $1
  local name=$1 base=${1%_seed*} seed=0
  [[ "$name" == *_seed* ]] && seed=${name##*_seed}
  echo "--gin gin/trembl_$base.gin"
  case "$budget" in
    tiny) echo "--gin gin/reproduce/tiny.gin" ;;
    mini) echo "--gin gin/reproduce/mini.gin" ;;
  esac
  echo "--gin_param DataConfig.path='$data' --gin_param TrainConfig.seed=$seed"
  [ -n "$steps" ] && echo "--gin_param TrainConfig.steps=$steps"
  # Sizes of the attention itself, scaled with the model: m = 4 d_head as the paper's 256 at
  # d_head = 64; Linformer k = 0.59 L as the paper's 600 at L = 1024.
  case "$budget:$base" in
    mini:*performer*) echo "--gin_param ModelConfig.attention_options={'num_features':64}" ;;
    mini:*linformer) echo "--gin_param ModelConfig.attention_options={'num_projections':150}" ;;
    tiny:*performer*) echo "--gin_param ModelConfig.attention_options={'num_features':16}" ;;
    tiny:*linformer) echo "--gin_param ModelConfig.attention_options={'num_projections':16}" ;;
    tiny:*reformer) echo "--gin_param ModelConfig.attention_options={'chunk_size':8,'n_buckets':4}" ;;
  esac
}

i=0
for name in "${chosen[@]}"; do
  i=$((i + 1))
  workdir=$runs/$name
  say "[$i/${#chosen[@]}] $name: train ($workdir)"
  # shellcheck disable=SC2046  # the bindings are words on purpose
  run $performer train $(bindings "$name") ${extra[@]+"${extra[@]}"} --workdir "$workdir"
  todo=()
  for split in test ood; do  # skip a split evaluated since the last checkpoint
    [ "$workdir/eval_$split.json" -nt "$workdir/checkpoints" ] || todo+=("$split")
  done
  if [ ${#todo[@]} -gt 0 ]; then
    splits=$(IFS=,; echo "${todo[*]}")
    say "[$i/${#chosen[@]}] $name: eval $splits"
    run $performer eval --workdir "$workdir" --split "$splits" > /dev/null
  fi
done

# --- tables, figures and verdicts, from the run folders alone ---
all=()
for name in "${experiments[@]}"; do [ -f "$runs/$name/eval_test.json" ] && all+=("$runs/$name"); done
say "figures -> $results/"
$performer figure table1 --input "$data" --out "$results/table1.md"
$performer figure table2 --runs "${all[@]}" --out "$results/table2.md"
$performer figure claims --runs "${all[@]}" --out "$results/claims.md"
for metric in accuracy perplexity; do
  $performer figure curves --runs "${all[@]}" --metric $metric --out "$results/fig6_$metric.png"
done
say "done: $results/{table1,table2,claims}.md (+ .csv), $results/fig6_{accuracy,perplexity}.png"
