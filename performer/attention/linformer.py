"""Linformer attention (Wang et al. 2020) as the paper's App. A.6 ran it, with redrawn projections.

Bidirectional only: E, F [k, L] project keys and values along the length, mixing every position."""

import jax
import jax.numpy as jnp
from flax import nnx

from performer import favor
from performer.attention.registry import RandomFeatures, register

PROJECTIONS = ("random", "learned")


@register("linformer", label="Linformer", causal=False, colour="C4")
class LinformerAttention(nnx.Module):
  """softmax(q (E k)^T / sqrt(d)) (F v) with E, F [num_projections, max_len]: random or learned."""

  def __init__(self, *, max_len, rngs, layer=0, num_projections=600, projections="random",
               delta=1e-6, seed=0):
    if projections not in PROJECTIONS:
      raise ValueError(f"unknown linformer projections {projections!r}; choose from "
                       f"{', '.join(PROJECTIONS)}")
    if num_projections < 1:
      raise ValueError(f"num_projections must be >= 1, got {num_projections}")
    self.max_len, self.num_projections, self.projections = max_len, num_projections, projections
    self.delta, self.layer, self.seed = delta, layer, seed
    if projections == "learned":
      init = nnx.initializers.normal(stddev=num_projections ** -0.5)
      self.E = nnx.Param(init(rngs.params(), (num_projections, max_len)))
      self.F = nnx.Param(init(rngs.params(), (num_projections, max_len)))
    else:
      self.R = RandomFeatures(self.draw(0))  # [k, max_len]; E = R, F = e^-delta R

  def draw(self, step):
    """R [num_projections, max_len], entries N(0, 1/k), of training step `step` (int or traced)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), self.layer), step)
    shape = (self.num_projections, self.max_len)
    return jax.random.normal(key, shape) * self.num_projections ** -0.5

  def redraw(self, step):
    """Sets R to `draw(step)`: once per training step, never in eval; learned E, F stay."""
    if self.projections == "random":
      self.R[...] = self.draw(step)

  def __call__(self, q, k, v, *, mask=None, causal=False):
    """q, k, v: [B, L, H, d]; mask: [B, L] bool (True = real key). Returns [B, L, H, d] in v's dtype.

    Raises:
      ValueError: causal=True, or L > max_len; bad inputs (see registry.make).
    """
    if causal:
      raise ValueError("linformer attention cannot be causal: its projections mix every "
                       "position of the sequence; use it for bidirectional (B) models only")
    length = k.shape[1]
    if length > self.max_len:
      raise ValueError(f"sequence length {length} exceeds linformer max_len {self.max_len}")
    if self.projections == "learned":
      E, F = self.E[...], self.F[...]
    else:
      E, F = self.R[...], jnp.exp(-self.delta) * self.R[...]
    if mask is not None:  # padded keys and values contribute nothing to E k, F v
      k = jnp.where(mask[:, :, None, None], k, 0)
      v = jnp.where(mask[:, :, None, None], v, 0)
    k_proj = jnp.einsum("pl,blhd->bphd", E[:, :length].astype(k.dtype), k)  # [B, k, H, d]
    v_proj = jnp.einsum("pl,blhd->bphd", F[:, :length].astype(v.dtype), v)
    return favor.softmax_attention(q, k_proj, v_proj)
