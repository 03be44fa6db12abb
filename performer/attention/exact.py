"""Exact softmax attention, Eq. (1)-(2): the Transformer baseline."""

from flax import nnx

from performer import favor
from performer.attention.registry import kv_cache_size, register


@register("exact", label="Transformer", colour="C3")
class ExactAttention(nnx.Module):
  """softmax(q k^T / sqrt(d)) v, O(L^2) time and memory."""

  state_size = staticmethod(kv_cache_size)  # the registry's BackendInfo.state_size

  def __call__(self, q, k, v, *, mask=None, causal=False):
    return favor.softmax_attention(q, k, v, causal=causal, mask=mask)
