#!/bin/bash
# recall_conv train step: 200 steps, log every 50; the median step_time of logs 2-4
cd "$(git rev-parse --show-toplevel)"  # needs runs/reproduce/mini/data/mqar_zoology/L64_kv4 (performer reproduce --only recall_conv prepares it)
mkdir -p /tmp/ab
for rep in 1 2; do
for m in 256 1024; do for bt in 0 256; do
  w=/tmp/ab/run_m${m}_bt${bt}_$rep; rm -rf $w
  .venv/bin/performer train --gin gin/recall/base.gin --gin gin/recall/zoology.gin \
    --gin_param "DataConfig.path='runs/reproduce/mini/data/mqar_zoology/L64_kv4'" --gin_param DataConfig.seq_len=64 \
    --gin_param "ModelConfig.attention='performer_softmax'" \
    --gin_param "ModelConfig.attention_options={'num_features': $m, 'batch_tokens': $bt}" \
    --gin_param TrainConfig.steps=200 --gin_param TrainConfig.log_every=50 --gin_param TrainConfig.eval_every=1000 \
    --gin_param TrainConfig.checkpoint_every=1000 --workdir $w > $w.log 2>&1
  python3 -c "
import json,statistics
rows=[json.loads(l) for l in open('$w/metrics.jsonl') if '\"train\"' in l]
print('m=$m bt=$bt rep $rep', [round(r['step_time']*1e3,1) for r in rows])"
done; done; done
