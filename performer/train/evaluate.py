"""performer eval: metrics of a trained workdir on a split, written to eval_<split>.json.

For protein data it adds the empirical amino-acid frequency baseline of
Table 2: predict every target from the token frequencies of the train split
(accuracy of always guessing the commonest token, perplexity of the
frequency distribution), over exactly the positions the model is scored on.
The frequencies come from the first BASELINE_TRAIN_BATCHES batches of train.
"""

import itertools
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


# Frequencies come from at most this many train batches (all of a smaller train split):
# on Swiss-Prot that is 8M positions at batch 32, L = 256, and a full pass would cost
# more than the eval itself. Measured there: against 32,000 random train sequences the
# first 32,000 differ by at most 0.0017 in any frequency and give perplexity 17.9545
# against 17.9526, the same commonest residue.
BASELINE_TRAIN_BATCHES = 1000


# Jitted once: called eagerly per batch, the (B) masking's vmap would dispatch op by op.
_model_inputs = jax.jit(steps.model_inputs, static_argnames=("tokens", "causal", "mlm"))


def _train_frequencies(cfgs, tokens):
  """Token frequencies over the scored positions of (the first batches of) the train split."""
  causal, mlm = cfgs["model"].causal, cfgs["data"].mlm
  train = pipeline.Batches(cfgs["data"], "train", causal=causal)
  counts = np.zeros(tokens[0], np.float64)
  for batch in itertools.islice(train.eval_batches(), BASELINE_TRAIN_BATCHES):
    weights = np.asarray(_model_inputs(batch, tokens, jax.random.key(0), causal=causal,
                                            mlm=mlm)[3]) > 0
    counts += np.bincount(batch["targets"][weights], minlength=tokens[0])
  return counts / counts.sum()


def _baseline(cfgs, tokens, freq, split_batches):
  """Empirical-frequency accuracy and perplexity over the scored positions of a split."""
  causal, mlm = cfgs["model"].causal, cfgs["data"].mlm
  hits = nll = n = 0.0
  for batch in split_batches.eval_batches():
    weights = np.asarray(_model_inputs(batch, tokens, jax.random.key(cfgs["train"].seed + 1),
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
  return run_splits(workdir, (split,))[0]


def run_splits(workdir, splits):
  """`run` for several splits at once (one restore, one compile); returns their results in order."""
  config = os.path.join(workdir, "config.gin")
  if not os.path.exists(config):
    raise UserError(f"{workdir}: no config.gin; is it a `performer train` workdir?")
  configurables.parse([config], [])
  cfgs, model, optimizer, tokens = loop.build()
  causal, mlm = cfgs["model"].causal, cfgs["data"].mlm
  every = [pipeline.Batches(cfgs["data"], split, causal=causal) for split in splits]  # checks all first
  with Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints")), create=False) as ckpt:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f"{workdir}: no checkpoint yet")
    ckpt.restore(step, model, optimizer)
  proteins = pipeline.vocab_info(cfgs["data"])[0] == vocab.VOCAB_SIZE  # Table 2's baseline
  freq = _train_frequencies(cfgs, tokens) if proteins else None
  results = []
  for split, batches in zip(splits, every):
    multiplier = pipeline.multiplier(cfgs["data"], split)  # PG-19: adds word-level perplexity
    result = loop.evaluate(model, batches, seed=cfgs["train"].seed, tokens=tokens, causal=causal,
                           mlm=mlm, multiplier=multiplier)
    result.update(step=step, split=split)
    if proteins:
      result.update(_baseline(cfgs, tokens, freq, batches))
    with atomic_path(os.path.join(workdir, f"eval_{split}.json")) as tmp, open(tmp, "w") as f:
      json.dump(result, f, indent=1, sort_keys=True)
      f.write("\n")
    results.append(result)
  return results
