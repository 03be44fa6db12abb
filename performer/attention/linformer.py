"""Linformer attention (Wang et al. 2020; paper App. A.6): keys and values projected along L.

K' = E K and V' = F V with learned E, F of shape [k, max_len] (k = 600 in
A.6), then exact softmax attention of the L queries over the k projected
keys. Mixing all positions along the length makes it bidirectional only.
"""

import jax.numpy as jnp
from flax import nnx

from performer import favor
from performer.attention.registry import register


@register("linformer")
class LinformerAttention(nnx.Module):
  """softmax(q (E k)^T / sqrt(d)) (F v); E, F: [num_projections, max_len] parameters."""

  def __init__(self, *, max_len, rngs, num_projections=600):
    init = nnx.initializers.normal(stddev=num_projections ** -0.5)
    self.max_len = max_len
    self.E = nnx.Param(init(rngs.params(), (num_projections, max_len)))
    self.F = nnx.Param(init(rngs.params(), (num_projections, max_len)))

  def __call__(self, q, k, v, *, mask=None, causal=False):
    if causal:
      raise ValueError("linformer attention cannot be causal: its projections mix every "
                       "position of the sequence; use it for bidirectional (B) models only")
    length = k.shape[1]
    if length > self.max_len:
      raise ValueError(f"sequence length {length} exceeds linformer max_len {self.max_len}")
    if mask is not None:  # padded keys and values contribute nothing to E k, F v
      k = jnp.where(mask[:, :, None, None], k, 0)
      v = jnp.where(mask[:, :, None, None], v, 0)
    k_proj = jnp.einsum("pl,blhd->bphd", self.E[:, :length].astype(k.dtype), k)  # [B, k, H, d]
    v_proj = jnp.einsum("pl,blhd->bphd", self.F[:, :length].astype(v.dtype), v)
    return favor.softmax_attention(q, k_proj, v_proj)
