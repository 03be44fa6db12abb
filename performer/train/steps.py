"""Pure train and eval steps (jitted by the loop); they return sums, never means."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from performer.attention import redraw
from performer.data.masking import mlm_mask
from performer.train import metrics


def model_inputs(batch, vocab, key, *, causal, mlm):
  """Batch -> (inputs [B, L], mask [B, L] bool, targets [B, L], weights [B, L] float).

  vocab: the dataset's vocab.Ids.
  mlm: the (B) corruption proportions, a masking.MLM (DataConfig.mlm).
  (U): weights on every real target. (B): inputs MLM-corrupted, weights on the
  selected positions only. A classification batch (batch["labels"] [B], ListOps) is neither:
  the inputs as they are, targets [B, 1] the labels, weight 1 each. Examples with id -1 (eval
  padding) weigh nothing.
  """
  real = (batch["ids"] >= 0)[:, None]
  if "labels" in batch:
    inputs = batch["inputs"]
    return inputs, inputs != vocab.pad, batch["labels"][:, None], real.astype(jnp.float32)
  targets = batch["targets"]
  if causal:
    inputs = batch["inputs"]
    weights = ((targets != vocab.pad) & real).astype(jnp.float32)
  else:
    inputs, weights = mlm_mask(targets, batch["ids"], key, mask_id=vocab.mask, pad_id=vocab.pad,
                               random_low=vocab.first_regular, random_high=vocab.size,
                               proportions=mlm)
    weights = weights * real
  return inputs, inputs != vocab.pad, targets, weights


def scored(model, batch, inputs, mask, targets, weights):
  """(logits, targets, weights) of the positions a batch is scored on.

  Every position ([B, L, V], [B, L], [B, L]), or, when the data names them
  in batch["positions"] [B, K] (MQAR's queries), those K only: the model
  computes logits there alone ([B, K, V], [B, K], [B, K]).
  """
  positions = batch.get("positions")
  if positions is None:
    return model(inputs, mask), targets, weights
  take = lambda x: jnp.take_along_axis(x, positions, axis=1)
  return model(inputs, mask, positions=positions), take(targets), take(weights)


def train_step(graphdef, state, batch, step, *, seed, vocab, causal, mlm):
  """One update at `step` of the (model, optimizer) pair that nnx.merge(graphdef, state) gives.

  Redraws random features, reseeds dropout and masks (B) inputs, all from
  (seed, step). Returns (the new state, sums of the batch, global gradient
  norm). A non-finite gradient leaves the parameters unchanged
  (optax.apply_if_finite); the loop stops when it sees it.
  """
  model, optimizer = nnx.merge(graphdef, state)
  redraw(model, step)
  key = jax.random.fold_in(jax.random.key(seed), step)
  nnx.reseed(model, dropout=jax.random.fold_in(key, 0))
  inputs, mask, targets, weights = model_inputs(batch, vocab, jax.random.fold_in(key, 1),
                                                causal=causal, mlm=mlm)

  def loss_fn(model):
    sums = metrics.sums(*scored(model, batch, inputs, mask, targets, weights))
    return sums["loss_sum"] / jnp.maximum(sums["tokens"], 1.0), sums

  (_, sums), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  optimizer.update(model, grads)
  return nnx.state((model, optimizer)), sums, optax.tree.norm(grads)


def eval_key(seed, draw=0):
  """The key of (B) eval masks: draw 0 is the one key every eval used; draw d > 0 another."""
  key = jax.random.key(seed + 1)
  return key if draw == 0 else jax.random.fold_in(key, draw)


def eval_step(model, batch, key, *, vocab, causal, mlm):
  """Sums over one batch, without redraw or dropout; (B) masks from `key` and the example ids.

  Returns:
    (sums over the batch, per-example sums [B] with the batch's `ids`).
  """
  inputs, mask, targets, weights = model_inputs(batch, vocab, key, causal=causal, mlm=mlm)
  logits, targets, weights = scored(model, batch, inputs, mask, targets, weights)
  return (metrics.sums(logits, targets, weights),
          {**metrics.example_sums(logits, targets, weights), "ids": batch["ids"]})
