"""performer eval: metrics of a trained workdir on a split, written to eval_<split>.json.

For protein data it adds the empirical amino-acid frequency baseline of
Table 2: predict every target from the token frequencies of the train split
(accuracy of always guessing the commonest token, perplexity of the
frequency distribution), over exactly the positions the model is scored on.
"""

import json
import math
import os

import jax
import numpy as np

from performer import configurables
from performer.atomic import atomic_path
from performer.data import pipeline, vocab
from performer.errors import UserError
from performer.train import loop, steps
from performer.train.checkpoint import Checkpoints


def _baseline(cfgs, tokens, split_batches):
  """Empirical-frequency accuracy and perplexity over the scored positions of a split."""
  causal, mlm = cfgs["model"].causal, cfgs["data"].mlm
  train = pipeline.Batches(cfgs["data"], "train", causal=causal)
  counts = np.zeros(tokens[0], np.float64)
  for batch in train.eval_batches():
    weights = np.asarray(steps.model_inputs(batch, tokens, jax.random.key(0), causal=causal,
                                            mlm=mlm)[3]) > 0
    counts += np.bincount(batch["targets"][weights], minlength=tokens[0])
  freq = counts / counts.sum()
  hits = nll = n = 0.0
  for batch in split_batches.eval_batches():
    weights = np.asarray(steps.model_inputs(batch, tokens, jax.random.key(cfgs["train"].seed + 1),
                                            causal=causal, mlm=mlm)[3]) > 0
    targets = batch["targets"][weights]
    hits += np.sum(targets == np.argmax(freq))
    nll -= np.sum(np.log(np.maximum(freq[targets], 1e-12)))
    n += len(targets)
  return {"baseline_accuracy": hits / n, "baseline_perplexity": math.exp(nll / n)}


def run(workdir, split):
  """Evaluates the latest checkpoint of `workdir` on `split`; writes and returns eval_<split>.json.

  Each split has its own file, so evaluating another split keeps the first result.

  Raises:
    UserError: no trained run in workdir, or no such split in its dataset.
  """
  config = os.path.join(workdir, "config.gin")
  if not os.path.exists(config):
    raise UserError(f"{workdir}: no config.gin; is it a `performer train` workdir?")
  configurables.parse([config], [])
  cfgs, model, optimizer, tokens = loop.build()
  causal, mlm = cfgs["model"].causal, cfgs["data"].mlm
  batches = pipeline.Batches(cfgs["data"], split, causal=causal)
  with Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints")), create=False) as ckpt:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f"{workdir}: no checkpoint yet")
    ckpt.restore(step, model, optimizer)
  multiplier = pipeline.multiplier(cfgs["data"], split)  # PG-19: adds word-level perplexity
  result = loop.evaluate(model, batches, seed=cfgs["train"].seed, tokens=tokens, causal=causal,
                         mlm=mlm, multiplier=multiplier)
  result.update(step=step, split=split)
  if pipeline.vocab_info(cfgs["data"])[0] == vocab.VOCAB_SIZE:  # proteins: Table 2's baseline
    result.update(_baseline(cfgs, tokens, batches))
  with atomic_path(os.path.join(workdir, f"eval_{split}.json")) as tmp, open(tmp, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True)
    f.write("\n")
  return result
