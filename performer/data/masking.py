"""Masked-language-model corruption for the bidirectional (B) task (paper App. A.1).

Draws come from fold_in(key, example_id): an example is masked alike in whatever batch it is."""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class MLM(NamedTuple):
  """Corruption proportions (DataConfig.mlm_* checks their ranges); defaults are App. A.1's."""
  rate: float = 0.15  # share of real positions selected (and scored)
  mask: float = 0.8  # share of the selected that become the mask token
  random: float = 0.1  # share of the selected that become a random token


def mlm_mask(tokens, example_ids, key, *, mask_id, pad_id, random_low, random_high,
             proportions=MLM()):
  """Corrupts a batch for MLM.

  Args:
    tokens: [B, L] int token ids.
    example_ids: [B] int, a stable id per example (e.g. its dataset index).
    key: a `jax.random` key (the run's masking seed).
    mask_id, pad_id: the mask and pad token ids.
    random_low, random_high: random replacements are drawn from [low, high)
      (for proteins the 25 amino acids, never special tokens).
    proportions: an MLM of (rate, mask, random) shares.

  Returns:
    (inputs [B, L] int, weights [B, L] float32): the corrupted tokens, and 1
    at the selected positions, where the loss and metrics are taken.
  """
  rate, mask, random = proportions

  def one(row, example_id):
    k_select, k_action, k_random = jax.random.split(jax.random.fold_in(key, example_id), 3)
    selected = (jax.random.uniform(k_select, row.shape) < rate) & (row != pad_id)
    action = jax.random.uniform(k_action, row.shape)
    replacement = jax.random.randint(k_random, row.shape, random_low, random_high, row.dtype)
    corrupted = jnp.where(action < mask, mask_id,
                          jnp.where(action < mask + random, replacement, row))
    return jnp.where(selected, corrupted, row), selected.astype(jnp.float32)
  return jax.vmap(one)(tokens, example_ids)
