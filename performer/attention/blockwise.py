"""Memory-efficient exact attention: softmax over key blocks with a running maximum.

Exact softmax attention without the L x L matrix: the peer to a Performer on long sequences."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from performer.attention.registry import register
from performer.favor import blocks

DEFAULT_BLOCK = 512  # query and key block length


def blockwise_attention(q, k, v, *, causal=False, mask=None, block=DEFAULT_BLOCK):
  """Exact softmax attention in blocks: equal to favor.softmax_attention up to float rounding.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; v: [B, Lk, H, dv]; any float dtype
      (logits and sums in float32).
    causal: query i attends to keys j <= i (needs Lq == Lk).
    mask: [B, Lk] bool key padding mask (True = real token) or None.
    block: query and key block length (a Python int >= 1).

  Returns:
    [B, Lq, H, dv] in v's dtype. A query with no visible key gets the mean of
    all values, as softmax_attention gives.

  Raises:
    ValueError: inconsistent shapes, Lq, Lk or d = 0, q, k or v not of a
      floating dtype, a mask not bool, or block < 1.
  """
  blocks.check_inputs(q, k, v, mask, causal)
  if not (isinstance(block, int) and block >= 1):
    raise ValueError(f"block must be a Python int >= 1, got {block!r}")
  if mask is None:
    mask = jnp.ones(k.shape[:2], bool)
  return _blockwise(q, k, v, mask, causal=causal,
                    q_block=min(block, q.shape[1]), k_block=min(block, k.shape[1]))


@functools.partial(jax.jit, static_argnames=("causal", "q_block", "k_block"))
def _blockwise(q, k, v, mask, *, causal, q_block, k_block):
  dtype, length = v.dtype, q.shape[1]
  scale = q.shape[-1] ** -0.5
  k_blocks, v_blocks = blocks.blocks(k.astype(jnp.float32), k_block), blocks.blocks(
      v.astype(jnp.float32), k_block)
  keep = blocks.mask_blocks(mask, k_block)[:, :, 0]  # [n, B, Ck]
  k_start = jnp.arange(k_blocks.shape[0]) * k_block
  mean_values = jnp.mean(v.astype(jnp.float32), axis=1)  # [B, H, dv]

  @jax.checkpoint
  def query_block(xs):
    q_blk, q_start = xs  # [B, Cq, H, d], []
    q_blk = q_blk.astype(jnp.float32) * scale
    q_pos = q_start + jnp.arange(q_block)
    batch, _, heads, _ = q_blk.shape
    init = (jnp.full((batch, heads, q_block), -jnp.inf),  # running max m
            jnp.zeros((batch, heads, q_block)),  # sum of exp(logit - m)
            jnp.zeros((batch, heads, q_block, v.shape[-1])))  # sum of exp(logit - m) v

    def key_block(carry, ys):
      k_blk, v_blk, keep_blk, start = ys

      def update(carry):
        m, s, acc = carry
        logits = jnp.einsum("bqhd,bkhd->bhqk", q_blk, k_blk)
        allowed = keep_blk[:, None, None, :]
        if causal:
          allowed = allowed & (q_pos[:, None] >= start + jnp.arange(k_block)[None, :])
        logits = jnp.where(allowed, logits, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(logits, axis=-1))
        safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)  # no key seen yet: no rescale
        p = jnp.exp(logits - safe[..., None])
        decay = jnp.exp(jnp.where(jnp.isfinite(m), m - safe, -jnp.inf))
        return (m_new, s * decay + jnp.sum(p, axis=-1),
                acc * decay[..., None] + jnp.einsum("bhqk,bkhd->bhqd", p, v_blk))

      if not causal:
        return update(carry), None
      after = start > q_start + q_block - 1  # every key of the block is after every query
      return jax.lax.cond(after, lambda c: c, update, carry), None

    (m, s, acc), _ = jax.lax.scan(key_block, init, (k_blocks, v_blocks, keep, k_start))
    # A query that saw no key: the mean of all values (softmax_attention's uniform weights).
    empty = s == 0.0
    out = jnp.where(empty[..., None], mean_values[:, :, None, :],
                    acc / jnp.where(empty, 1.0, s)[..., None])
    return jnp.swapaxes(out, 1, 2)  # [B, Cq, H, dv]

  q_blocks = blocks.blocks(q, q_block)
  out = jax.lax.map(query_block, (q_blocks, jnp.arange(q_blocks.shape[0]) * q_block))
  return blocks.unblock(out, length).astype(dtype)


@register("exact_blockwise", label="Transformer (blockwise)", colour="C7")
class BlockwiseAttention(nnx.Module):
  """Exact softmax attention in O(L) memory (`blockwise_attention`); block: its block length."""

  def __init__(self, *, block=DEFAULT_BLOCK):
    self.block = block

  def __call__(self, q, k, v, *, mask=None, causal=False):
    return blockwise_attention(q, k, v, causal=causal, mask=mask, block=self.block)
