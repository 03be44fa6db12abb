"""Linformer attention (Wang et al. 2020) as the paper's App. A.6 ran it: redrawn random projections.

softmax(q (E k)^T / sqrt(d)) (F v): keys and values are projected along the
length by E, F [k, L] (k = num_projections = 600 in A.6), then the L queries
attend exactly over the k projected keys. Mixing every position makes it
bidirectional (B) only.

`projections="random"` (the default, A.6): one matrix R [k, max_len] with
entries N(0, 1/k), the construction of Wang et al.'s Theorem 2 (its proof
takes E = delta R, F = e^-delta R with one R). It is state, not a trained
parameter: a `RandomFeatures` variable (skipped by the optimizer, kept by
checkpoints) drawn from (seed, layer, step) and redrawn every training step,
like a Performer's features ("we also use redrawing, which avoids unlucky
projections"); evaluation keeps the last step's draw.

A.6's delta: "delta = 1e-6 ... the exponent in a renormalization procedure
using e^-delta as a multiplier in order to approximate softmax" (the value is
garbled in our PDF text; 1e-6 is in the arXiv HTML of the paper; the
Performer code release has no Linformer to check against). We read it as
Wang et al.'s F = e^-delta R and E = R. The other reading, E = delta R as
in that proof, scales every logit by 1e-6: each query's weights become
uniform over the k projected keys and the output no longer depends on q, so
it approximates nothing; we did not take it. At delta = 1e-6 the multiplier
changes outputs by one part in a million: it is kept for fidelity only.

A.6 reports "within 0.02 error for all entries"; a zero-mean random
projection is no consistent estimator of softmax attention (the weights it
implies on the L tokens need not sum to one, at any k), so such a bound
holds only where outputs are small, as tests/attention/test_linformer.py
checks.

`projections="learned"`: Wang et al.'s trained E, F (separate `nnx.Param`s,
initialised N(0, 1/k)), never redrawn.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from performer import favor
from performer.attention.registry import RandomFeatures, register

PROJECTIONS = ("random", "learned")


@register("linformer", label="Linformer", causal=False)
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
      ValueError: causal=True, or L > max_len.
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
