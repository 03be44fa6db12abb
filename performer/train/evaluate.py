"""performer eval: metrics of a trained workdir on a split, written to eval_<split>.json.

Also writes per-example sums (eval_<split>_sequences.npz), which the verdicts bootstrap over."""

import itertools
import json
import math
import os
import sys

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from performer.atomic import atomic_path
from performer.data import pipeline, vocab
from performer.errors import UserError
from performer.train import distributed, metrics, resume, sharding, steps
from performer.train import state as state_lib
from performer.train.checkpoint import Checkpoints
from performer.train.config import Config


# Frequencies come from at most this many train batches (all of a smaller train split):
# on Swiss-Prot that is 8M positions at batch 32, L = 256, and a full pass would cost
# more than the eval itself. Measured there: against 32,000 random train sequences the
# first 32,000 differ by at most 0.0017 in any frequency and give perplexity 17.9545
# against 17.9526, the same commonest residue.
BASELINE_TRAIN_BATCHES = 1000


# One wrapper for the process: a new nnx.jit per call would compile the step again each time.
_eval_step = nnx.jit(steps.eval_step, static_argnames=("vocab", "causal", "mlm"))
# (B) eval masks 15% of positions per draw: over a small test split the few masked
# positions make the accuracy's sampling error several times that of (U) (15% of the positions
# scored: about sqrt(1 / 0.15) = 2.6 times). `performer eval` scores MASK_DRAWS independent
# draws of the masks and sums them (4 draws: 4x the scored positions, a quarter of the mask
# variance, at 4x the eval cost); training's validation keeps one draw. By MAX_MASK_DRAWS draws each
# position has been masked about 5 times (15% a draw) and the mask variance is a 32nd of one
# draw's, far below the sampling error over the split's examples, which more draws leave as it
# is: beyond it they only multiply the cost.
MASK_DRAWS = 4
MAX_MASK_DRAWS = 32


def check_mask_draws(mask_draws):
  """Raises UserError unless 1 <= mask_draws <= MAX_MASK_DRAWS."""
  if mask_draws < 1:
    raise UserError(f"--mask-draws must be >= 1, got {mask_draws}")
  if mask_draws > MAX_MASK_DRAWS:
    raise UserError(f"--mask-draws must be at most {MAX_MASK_DRAWS} (more draws only multiply "
                    f"the cost; train/evaluate.py says why), got {mask_draws}")


def evaluate(model, batches, *, seed, vocab, causal, mlm, mesh, multiplier=None, max_batches=0,
             per_example=False, mask_draws=1, progress=None):
  """Metrics of `model` over `batches.eval_batches()` (dropout off, no redraw).

  Every process runs every batch (`eval_batches` gives each the same number),
  and the sums are fetched once, at the end. A (B) model is scored on
  `mask_draws` independent draws of its masks, summed (draw 0 is the usual
  one); a (U) model has no masks and is scored once. `progress`, if given,
  labels a progress bar over the batches (distributed.progress).

  Returns:
    the metrics dict (metrics.summarize); with per_example, (metrics, {ids,
    loss_sum, correct_sum, tokens: [N] numpy}) over the split's real examples,
    by id (padding rows, id -1, dropped).
  """
  model.eval()
  sums, each = [], []
  draws = 1 if causal else mask_draws
  count = min(batches.eval_batch_count(), max_batches or math.inf)
  with distributed.progress(progress, draws * count, unit="batch",
                            enabled=progress is not None) as bar:
    for draw in range(draws):
      key = steps.eval_key(seed, draw)
      for batch in itertools.islice(batches.eval_batches(), max_batches or None):
        total, examples = _eval_step(model, sharding.global_batch(batch, mesh), key, vocab=vocab,
                                     causal=causal, mlm=mlm)
        sums.append(total)
        if per_example:
          each.append(examples)
        bar.update()
  model.train()
  result = metrics.summarize(metrics.total(jax.device_get(sums)), multiplier)
  if not per_example:
    return result
  gathered = {k: np.concatenate([_global(e[k]) for e in each]) for k in each[0]}
  real = gathered["ids"] >= 0
  ids, inverse = np.unique(gathered["ids"][real], return_inverse=True)  # draws of one example add
  out = {"ids": ids.astype(np.int64)}
  for k in ("loss_sum", "correct_sum", "tokens"):
    out[k] = np.bincount(inverse, weights=gathered[k][real], minlength=len(ids)).astype(np.float32)
  return result, out


def _global(x):
  """A global [B] array as numpy on every process (process_allgather for several hosts)."""
  if jax.process_count() == 1:
    return np.asarray(jax.device_get(x))
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))


# Jitted once: called eagerly per batch, the (B) masking's vmap would dispatch op by op.
_model_inputs = jax.jit(steps.model_inputs, static_argnames=("vocab", "causal", "mlm"))


def _train_frequencies(cfg):
  """Token frequencies over the scored positions of (the first batches of) the train split."""
  causal, mlm = cfg.model.causal, cfg.data.mlm
  train = pipeline.batches(cfg.data, "train", causal=causal, **_process())
  counts = np.zeros(cfg.vocab.size, np.float64)
  for batch in itertools.islice(train.eval_batches(), BASELINE_TRAIN_BATCHES):
    weights = np.asarray(_model_inputs(batch, cfg.vocab, jax.random.key(0), causal=causal,
                                       mlm=mlm)[3]) > 0
    counts += np.bincount(batch["targets"][weights], minlength=cfg.vocab.size)
  counts = _over_processes(counts)
  return counts / counts.sum()


def _baseline(cfg, freq, split_batches, mask_draws):
  """Empirical-frequency accuracy and perplexity over the scored positions of a split (the same
  mask draws as the model's)."""
  causal, mlm = cfg.model.causal, cfg.data.mlm
  hits = nll = n = 0.0
  for draw in range(1 if causal else mask_draws):
    key = steps.eval_key(cfg.train.seed, draw)
    for batch in split_batches.eval_batches():
      weights = np.asarray(_model_inputs(batch, cfg.vocab, key, causal=causal, mlm=mlm)[3]) > 0
      targets = batch["targets"][weights]
      hits += np.sum(targets == np.argmax(freq))
      nll -= np.sum(np.log(np.maximum(freq[targets], 1e-12)))
      n += len(targets)
  hits, nll, n = _over_processes(np.array([hits, nll, n]))
  return {"baseline_accuracy": hits / n, "baseline_perplexity": math.exp(nll / n)}


def _process():
  return dict(process_index=jax.process_index(), process_count=jax.process_count())


def _over_processes(x):
  """The sum over all processes of a float64 array (each process counted its own rows).

  The all-gather moves the float64 bits as int32 pairs: JAX arrays would be
  float32 (x64 off), too coarse for a sum of log-likelihoods.
  """
  x = np.ascontiguousarray(x, np.float64)
  if jax.process_count() == 1:
    return x
  bits = np.asarray(multihost_utils.process_allgather(x.view(np.int32)))  # [P, 2 n]
  return np.ascontiguousarray(bits).view(np.float64).sum(0)


def run(workdir, split, *, mask_draws=MASK_DRAWS):
  """Evaluates the latest checkpoint of `workdir` on `split`; writes and returns eval_<split>.json.

  Each split has its own file, so evaluating another split keeps the first result.
  A (B) model is scored over `mask_draws` draws of its masks (see MASK_DRAWS).

  Raises:
    UserError: no trained run in workdir, no such split in its dataset, or
      a dataset at DataConfig.path other than the one the run trained on.
  """
  return run_splits(workdir, (split,), mask_draws=mask_draws)[0]


def run_splits(workdir, splits, *, mask_draws=MASK_DRAWS):
  """`run` for several splits at once (one restore, one compile); returns their results in order."""
  check_mask_draws(mask_draws)
  cfg = Config.load(workdir)
  if cfg.model.causal or cfg.model.pooling:  # no masks to draw: (U), or a classifier's label
    mask_draws = 1
  resume.check_dataset(workdir, cfg.data.path)
  model, optimizer = state_lib.build(cfg)
  mesh = sharding.make_mesh(cfg.mesh)
  every = [pipeline.batches(cfg.data, split, causal=cfg.model.causal, **_process())
           for split in splits]  # checks all first
  with Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints"))) as ckpt:
    step = ckpt.latest_step()
    if step is None:
      raise UserError(f"{workdir}: no checkpoint yet")
    state_lib.placed(model, optimizer, mesh, cfg.mesh.rules)
    ckpt.restore(step, model, optimizer)
  proteins = cfg.vocab == vocab.PROTEIN_IDS  # Table 2's baseline
  freq = _train_frequencies(cfg) if proteins else None
  results = []
  for split, batches in zip(splits, every):
    multiplier = pipeline.multiplier(cfg.data, split)  # PG-19: adds word-level perplexity
    result, each = evaluate(model, batches, seed=cfg.train.seed, vocab=cfg.vocab,
                            causal=cfg.model.causal, mlm=cfg.data.mlm, mesh=mesh,
                            multiplier=multiplier, per_example=True, mask_draws=mask_draws,
                            progress=f"eval {split}")
    result.update(step=step, split=split, sequences_file=f"eval_{split}_sequences.npz",
                  mask_draws=mask_draws)
    if not math.isfinite(result["loss"]):  # tables show it as diverged, not refuse every run
      result["diverged"] = True
      if jax.process_index() == 0:
        print(f"performer eval: warning: {workdir}: non-finite {split} loss: the model diverged; "
              f"eval_{split}.json marks it", file=sys.stderr)
    if proteins:
      result.update(_baseline(cfg, freq, batches, mask_draws))
    if jax.process_index() == 0:
      with atomic_path(os.path.join(workdir, result["sequences_file"])) as tmp, \
          open(tmp, "wb") as f:
        np.savez_compressed(f, **each)
      with atomic_path(os.path.join(workdir, f"eval_{split}.json")) as tmp, open(tmp, "w") as f:
        # A diverged model's NaN and Inf as null: strict JSON, which every parser reads.
        json.dump({k: None if isinstance(v, float) and not math.isfinite(v) else v
                   for k, v in result.items()}, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    results.append(result)
  return results
