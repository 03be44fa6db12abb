"""Pure train and eval steps (jitted by the loop); they return sums, never means."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from performer.attention import redraw
from performer.data.masking import mlm_mask
from performer.train import metrics


def model_inputs(batch, tokens, key, *, causal, mlm):
  """Batch -> (inputs [B, L], mask [B, L] bool, targets [B, L], weights [B, L] float).

  tokens: (vocab_size, pad, eos, mask_id, first_regular) of the dataset.
  mlm: the (B) corruption proportions, a masking.MLM (DataConfig.mlm).
  (U): weights on every real target. (B): inputs MLM-corrupted, weights on the
  selected positions only. Examples with id -1 (eval padding) weigh nothing.
  """
  vocab_size, pad, _, mask_id, first_regular = tokens
  targets = batch["targets"]
  real = (batch["ids"] >= 0)[:, None]
  if causal:
    inputs = batch["inputs"]
    weights = ((targets != pad) & real).astype(jnp.float32)
  else:
    inputs, weights = mlm_mask(targets, batch["ids"], key, mask_id=mask_id, pad_id=pad,
                               random_low=first_regular, random_high=vocab_size, proportions=mlm)
    weights = weights * real
  return inputs, inputs != pad, targets, weights


def train_step(model, optimizer, batch, step, *, seed, tokens, causal, mlm):
  """One update at `step`: redraws random features, reseeds dropout, masks (B) inputs.

  Returns (sums of the batch, global gradient norm). A non-finite gradient
  leaves the parameters unchanged (optax.apply_if_finite); the loop stops.
  """
  redraw(model, step)
  key = jax.random.fold_in(jax.random.key(seed), step)
  nnx.reseed(model, dropout=jax.random.fold_in(key, 0))
  inputs, mask, targets, weights = model_inputs(batch, tokens, jax.random.fold_in(key, 1),
                                                causal=causal, mlm=mlm)

  def loss_fn(model):
    sums = metrics.sums(model(inputs, mask), targets, weights)
    return sums["loss_sum"] / jnp.maximum(sums["tokens"], 1.0), sums

  (_, sums), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  optimizer.update(model, grads)
  return sums, optax.tree.norm(grads)


def eval_step(model, batch, *, seed, tokens, causal, mlm):
  """Sums over one batch, without redraw or dropout; (B) masks keyed by example id."""
  inputs, mask, targets, weights = model_inputs(batch, tokens, jax.random.key(seed + 1),
                                                causal=causal, mlm=mlm)
  return metrics.sums(model(inputs, mask), targets, weights)
