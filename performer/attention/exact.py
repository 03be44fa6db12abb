"""Exact softmax attention, Eq. (1)-(2): the Transformer baseline."""

from flax import nnx

from performer import favor
from performer.attention.registry import register


@register("exact", label="Transformer")
class ExactAttention(nnx.Module):
  """softmax(q k^T / sqrt(d)) v, O(L^2) time and memory."""

  def __call__(self, q, k, v, *, mask=None, causal=False):
    return favor.softmax_attention(q, k, v, causal=causal, mask=mask)
