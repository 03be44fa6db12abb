"""Bidirectional FAVOR, Eq. (4), read in blocks (see attention.py for the numerics)."""

import functools

import jax
import jax.numpy as jnp

from performer.favor import blocks, numerics


def bidirectional(q, k, v, mask, featurize_q, featurize_k, block, operand_dtype,
                  renormalize=True):
  """D^-1 (Q' ((K')^T V)) block by block (Q' ((K')^T V) when not renormalize); q, k
  [B, L, H, d], v [B, Lk, H, dv] -> float32 [B, Lq, H, dv].

  Keys are read in blocks of `block`, keeping K'^T V and K'^T 1 against a
  running per-feature maximum c_f (a rescale when it grows, as in online
  softmax); queries are then read in blocks against the final state. A
  block as long as the sequence leaves no loop: two products. Only a
  block's [B, H, block, M] features exist at a time, and the backward pass
  recomputes them (`jax.checkpoint`) instead of storing them.
  featurize_q, featurize_k: [B, H, C, d] -> `Features` of [B, H, C, M].
  operand_dtype: the products' operand dtype (float32 or bfloat16); the
  sums accumulate in float32.
  """
  batch, _, heads, dv = v.shape
  low = lambda x: x.astype(operand_dtype)
  dot = functools.partial(jnp.einsum, preferred_element_type=jnp.float32)
  q_blocks, k_blocks, v_blocks = (blocks.blocks(x, block) for x in (q, k, v))
  keep_blocks = blocks.mask_blocks(mask, block)  # [n, B, 1, block]
  size = featurize_k(blocks.heads_first(k_blocks[0, :, :1]))
  m = (size.value if size.value is not None else size.log).shape[-1]

  @jax.checkpoint
  def key_block(carry, xs):
    kv, z, c = carry  # [B, H, M, dv], [B, H, M], [B, H, M or 1]
    k_blk, v_blk, keep = xs  # [B, C, H, d], [B, C, H, dv], [B, 1, C]
    kf, v_blk = featurize_k(blocks.heads_first(k_blk)), blocks.heads_first(v_blk)
    keep = keep[..., None]
    if kf.log is None:
      k_prime = jnp.where(keep, kf.value, 0.0)
    else:
      k_log = jnp.where(keep, kf.log, -jnp.inf)
      c_new = jax.lax.stop_gradient(jnp.maximum(c, jnp.max(k_log, axis=2)))
      decay = jnp.exp(c - c_new)
      kv, z = kv * decay[..., None], z * decay
      k_prime = numerics.times(kf.value, jnp.exp(k_log - c_new[:, :, None]))
      c = c_new
    k_prime = low(k_prime)
    return (kv + dot("bhcm,bhcd->bhmd", k_prime, low(v_blk)),
            z + jnp.sum(k_prime.astype(jnp.float32), 2), c), None

  c0 = jnp.full((batch, heads, 1 if size.log is None else size.log.shape[-1]), numerics.NO_KEY,
                jnp.float32)
  kv0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  (kv, z, c), _ = blocks.scan(key_block, (kv0, jnp.zeros((batch, heads, m)), c0),
                              (k_blocks, v_blocks, keep_blocks))

  @jax.checkpoint
  def query_block(_, q_blk):
    qf = featurize_q(blocks.heads_first(q_blk))
    q_prime = low(qf.value if qf.log is None else numerics.query_prime(qf, c[:, :, None]))
    return None, blocks.heads_first(numerics.normalise(
        dot("bhcm,bhmd->bhcd", q_prime, low(kv)),
        jnp.einsum("bhcm,bhm->bhc", q_prime.astype(jnp.float32), z), renormalize))

  _, out = blocks.scan(query_block, None, q_blocks)
  return blocks.unblock(out, q.shape[1])

