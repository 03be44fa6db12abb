"""Masked-language-model corruption for the bidirectional (B) task (paper App. A.1).

Select 15% of the real positions; of those 80% become the mask token, 10% a
random token and 10% stay unchanged. Pads are never selected. The random
draws come from fold_in(key, example_id), so an example is masked the same
way whatever batch it lands in.
"""

import jax
import jax.numpy as jnp


def mlm_mask(tokens, example_ids, key, *, mask_id, pad_id, random_low, random_high, rate=0.15):
  """Corrupts a batch for MLM.

  Args:
    tokens: [B, L] int token ids.
    example_ids: [B] int, a stable id per example (e.g. its dataset index).
    key: a `jax.random` key (the run's masking seed).
    mask_id, pad_id: the mask and pad token ids.
    random_low, random_high: random replacements are drawn from [low, high)
      (for proteins the 25 amino acids, never special tokens).
    rate: share of real positions selected (0.15).

  Returns:
    (inputs [B, L] int, weights [B, L] float32): the corrupted tokens, and 1
    at the selected positions, where the loss and metrics are taken.
  """
  def one(row, example_id):
    k_select, k_action, k_random = jax.random.split(jax.random.fold_in(key, example_id), 3)
    selected = (jax.random.uniform(k_select, row.shape) < rate) & (row != pad_id)
    action = jax.random.uniform(k_action, row.shape)
    replacement = jax.random.randint(k_random, row.shape, random_low, random_high, row.dtype)
    corrupted = jnp.where(action < 0.8, mask_id, jnp.where(action < 0.9, replacement, row))
    return jnp.where(selected, corrupted, row), selected.astype(jnp.float32)
  return jax.vmap(one)(tokens, example_ids)
