"""Bidirectional FAVOR, Eq. (4), read in blocks (see attention.py for the numerics).

`add_keys` and `read_queries` are one block's work, shared by the XLA form here and fused.py."""

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
  q_blocks, k_blocks, v_blocks = (blocks.blocks(x, block) for x in (q, k, v))
  keep_blocks = blocks.mask_blocks(mask, block)  # [n, B, 1, block]

  @jax.checkpoint
  def key_block(state, xs):
    k_blk, v_blk, keep = xs  # [B, C, H, d], [B, C, H, dv], [B, 1, C]
    return add_keys(state, featurize_k(blocks.heads_first(k_blk)), blocks.heads_first(v_blk),
                    keep, operand_dtype), None

  state = numerics.empty_state(featurize_k, k.shape[-1], dv, batch, heads)
  state, _ = blocks.scan(key_block, state, (k_blocks, v_blocks, keep_blocks))

  @jax.checkpoint
  def query_block(_, q_blk):
    qf = featurize_q(blocks.heads_first(q_blk))
    return None, blocks.heads_first(read_queries(state, qf, operand_dtype, renormalize))

  _, out = blocks.scan(query_block, None, q_blocks)
  return blocks.unblock(out, q.shape[1])


def add_keys(state, kf, v, keep, operand_dtype):
  """The state after one block of keys: kf `Features` of [..., C, M], v [..., C, dv], keep
  [..., C] bool (or broadcasting). Sums are kept against the running per-feature maximum c of
  the key logs. Any leading dimensions (none in fused.py's kernel): 2D products only."""
  kv, z, c = state
  keep = keep[..., None]
  if kf.log is None:
    k_prime = jnp.where(keep, kf.value, 0.0)
  else:
    k_log = jnp.where(keep, kf.log, -jnp.inf)
    c_new = jax.lax.stop_gradient(jnp.maximum(c, jnp.max(k_log, axis=-2)))
    decay = jnp.exp(c - c_new)
    kv, z = kv * decay[..., None], z * decay
    k_prime = numerics.times(kf.value, jnp.exp(k_log - c_new[..., None, :]))
    c = c_new
  k_prime = k_prime.astype(operand_dtype)
  return (kv + jnp.einsum("...cm,...cd->...md", k_prime, v.astype(operand_dtype),
                          preferred_element_type=jnp.float32),
          z + jnp.sum(k_prime.astype(jnp.float32), -2), c)


def read_queries(state, qf, operand_dtype, renormalize):
  """One block of queries against the keys' final state: qf `Features` of [..., C, M] ->
  float32 [..., C, dv]."""
  kv, z, c = state
  low = lambda x: x.astype(operand_dtype)
  q_prime = low(qf.value if qf.log is None else numerics.query_prime(qf, c[..., None, :]))
  return numerics.normalise(
      jnp.einsum("...cm,...md->...cd", q_prime, low(kv), preferred_element_type=jnp.float32),
      _normaliser(q_prime.astype(jnp.float32), z), renormalize)


def _normaliser(q_prime, z):
  """Q'(K'^T 1): float32 [..., C, M] and [..., M] -> [..., C]. In a kernel's block (no
  leading dims) a row sum, as Triton has no matrix-vector product; elsewhere a dot, since
  the broadcast product costs XLA on CPU a buffer outside its plan (measured at L = 4,096:
  the layer's resident peak 1.35x its buffer plan, against 1.00-1.16x with the dot)."""
  if q_prime.ndim == 2:
    return jnp.sum(q_prime * z[None, :], axis=-1)
  return jnp.einsum("...cm,...m->...c", q_prime, z)
