"""Metrics as sums plus a denominator, reduced once on the host (paper App. A.1).

(U): over all real positions; (B): over the masked positions only (the
weights say which). bits per token = loss / ln 2; perplexity =
exp(multiplier * loss), where the multiplier turns a per-token loss into a
word-level one for PG-19 (1 otherwise).
"""

import math

import jax.numpy as jnp
import optax


def sums(logits, targets, weights):
  """Per-batch sums: logits [B, L, V], targets [B, L] int, weights [B, L] in {0, 1}."""
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  correct = (jnp.argmax(logits, -1) == targets).astype(jnp.float32)
  return {"loss_sum": jnp.sum(nll * weights), "correct_sum": jnp.sum(correct * weights),
          "tokens": jnp.sum(weights)}


def add(a, b):
  """Adds two dicts of sums (either may be None)."""
  if a is None:
    return b
  return {k: a[k] + b[k] for k in a}


def summarize(totals, multiplier=1.0):
  """Sums -> {loss, accuracy, perplexity, bits_per_token, tokens}, floats."""
  tokens = float(totals["tokens"])
  loss = float(totals["loss_sum"]) / max(tokens, 1.0)
  return {"loss": loss, "accuracy": float(totals["correct_sum"]) / max(tokens, 1.0),
          "perplexity": math.exp(min(multiplier * loss, 700.0)),
          "bits_per_token": loss / math.log(2), "tokens": int(tokens)}
