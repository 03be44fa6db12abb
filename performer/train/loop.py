"""The training loop: run(workdir) trains the gin-configured model, resuming if it can.

Running it again on a workdir continues from the latest checkpoint: the
input pipeline position, dropout and random features are functions of the
step, so a killed and resumed run ends exactly where an uninterrupted one
does. Defaults follow App. A.2: Adam(b1 0.9, b2 0.98, eps 1e-9), learning
rate 1e-3, gradient clipping 0.5, weight decay 0.1, dropout 0.1.
"""

import dataclasses
import json
import math
import os
import time

import jax
import optax
import tqdm
from flax import nnx

from performer import configurables
from performer.data import pipeline
from performer.errors import UserError
from performer.models.transformer import TransformerLM
from performer.train import metrics, steps
from performer.train.checkpoint import Checkpoints
from performer.train.writer import MetricWriter


class TrainingDiverged(UserError):
  """A non-finite loss or gradient: the run stops, the last checkpoint stays."""


def optimizer_for(cfg):
  parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm else []
  parts.append(optax.adamw(cfg.learning_rate, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                           weight_decay=cfg.weight_decay))
  return optax.apply_if_finite(optax.chain(*parts), max_consecutive_errors=10 ** 9)


def build():
  """(configs dict, model, optimizer, dataset tokens) from the parsed gin config.

  Raises:
    UserError: an invalid configuration (e.g. d_model not divisible by
      num_heads, an unknown attention option) or missing data.
  """
  data = configurables.build("DataConfig")
  train = configurables.build("TrainConfig")
  optim = configurables.build("OptimConfig")
  tokens = pipeline.vocab_info(data)
  try:
    model_cfg = configurables.build("ModelConfig", vocab_size=tokens[0], max_len=data.seq_len)
    model = TransformerLM(model_cfg, rngs=nnx.Rngs(params=train.seed, dropout=train.seed))
  except ValueError as e:
    raise UserError(f"invalid model configuration: {str(e).splitlines()[0]}") from None
  optimizer = nnx.Optimizer(model, optimizer_for(optim), wrt=nnx.Param)
  return {"data": data, "train": train, "optim": optim, "model": model_cfg}, model, optimizer, tokens


def evaluate(model, batches, *, seed, tokens, causal, multiplier=1.0, max_batches=0):
  """Metrics of `model` over `batches.eval_batches()` (dropout off, no redraw)."""
  model.eval()
  step = nnx.jit(steps.eval_step, static_argnames=("seed", "tokens", "causal"))
  totals = None
  for i, batch in enumerate(batches.eval_batches()):
    if max_batches and i >= max_batches:
      break
    totals = metrics.add(totals, jax.device_get(step(model, batch, seed=seed, tokens=tokens,
                                                     causal=causal)))
  model.train()
  return metrics.summarize(totals, multiplier)


def run(workdir, *, progress=True):
  """Trains per the gin config already parsed; returns the last valid metrics.

  Raises:
    UserError: bad data or configuration; TrainingDiverged on a NaN or Inf.
  """
  # --- Set-up: configs, model, optimizer, checkpoints -------------------------
  os.makedirs(workdir, exist_ok=True)
  cfgs, model, optimizer, tokens = build()
  train, causal = cfgs["train"], cfgs["model"].causal
  ckpt = Checkpoints(os.path.abspath(os.path.join(workdir, "checkpoints")))
  start = ckpt.latest_step() or 0
  if start:
    ckpt.restore(start, model, optimizer)
  elif train.init_from:  # backward compatibility: a trained model's weights, new attention
    source = Checkpoints(os.path.abspath(os.path.join(train.init_from, "checkpoints")))
    print(f"initialised from {train.init_from} step {source.load_params(model)}")
    source.close()
  with open(os.path.join(workdir, "config.gin"), "w") as f:
    f.write(configurables.operative_config())
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({k: dataclasses.asdict(v) for k, v in cfgs.items()}, f, indent=1, sort_keys=True)

  # --- Data and step functions ------------------------------------------------
  process = dict(process_index=jax.process_index(), process_count=jax.process_count())
  train_data = pipeline.Batches(cfgs["data"], "train", causal=causal, **process)
  valid_data = pipeline.Batches(cfgs["data"], "valid", causal=causal, **process)
  valid_multiplier = pipeline.multiplier(cfgs["data"], "valid")
  train_step = nnx.jit(steps.train_step, static_argnames=("seed", "tokens", "causal"))
  writer = MetricWriter(workdir)
  totals, last_valid, tick = None, None, time.perf_counter()
  lr = cfgs["optim"].learning_rate

  # --- The loop -----------------------------------------------------------------
  bar = tqdm.tqdm(range(start, train.steps), initial=start, total=train.steps, desc="train",
                  disable=not progress)
  for step in bar:
    sums, grad_norm = train_step(model, optimizer, train_data.train_batch(step), step,
                                 seed=train.seed, tokens=tokens, causal=causal)
    sums, grad_norm = jax.device_get((sums, grad_norm))
    if not (math.isfinite(float(sums["loss_sum"])) and math.isfinite(float(grad_norm))):
      writer.close()
      raise TrainingDiverged(f"non-finite loss or gradient at step {step}; stopped; the last "
                             f"good checkpoint is step {ckpt.latest_step() or 'none'}")
    totals = metrics.add(totals, sums)
    done = step + 1
    if done % train.log_every == 0 or done == train.steps:
      seconds = time.perf_counter() - tick
      row = metrics.summarize(totals)
      n = done - (done - 1) // train.log_every * train.log_every
      row.update(learning_rate=lr, step_time=seconds / max(n, 1),
                 tokens_per_s=row["tokens"] / max(seconds, 1e-9), grad_norm=float(grad_norm))
      writer.write(done, row, "train")
      bar.set_postfix(loss=f"{row['loss']:.3f}", acc=f"{row['accuracy']:.3f}")
      totals, tick = None, time.perf_counter()
    if done % train.eval_every == 0 or done == train.steps:
      last_valid = evaluate(model, valid_data, seed=train.seed, tokens=tokens, causal=causal,
                            multiplier=valid_multiplier, max_batches=train.eval_batches)
      writer.write(done, last_valid, "valid")
    if done % train.checkpoint_every == 0 or done == train.steps:
      ckpt.save(done, model, optimizer, {"step": done})
  writer.close()
  ckpt.close()
  return last_valid
