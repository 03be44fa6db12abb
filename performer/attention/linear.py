"""Linear attention with elu(x) + 1 features (Katharopoulos et al. 2020; paper D.4)."""

from flax import nnx

from performer import favor
from performer.attention.registry import register


@register("linear", label="Linear", colour="C5")
class LinearAttention(nnx.Module):
  """phi(x) = elu(x) + 1 on unscaled q and k; bidirectional or causal (chunked)."""

  @staticmethod
  def state_size(options, seq_len, head_dim, value_dim):
    """K'^T V: M x d_v floats per head, M = d_k (the registry's BackendInfo.state_size)."""
    del options, seq_len
    return head_dim * value_dim

  def __init__(self, *, head_dim, chunk_size=None, span=None):
    self.head_dim = head_dim  # of q and k: the feature count M of the decoding state
    self.chunk_size, self.span = chunk_size, span  # None: the platform's (favor.form())

  def __call__(self, q, k, v, *, mask=None, causal=False):
    return favor.favor_attention(q, k, v, None, kernel="elu_plus_one", causal=causal, mask=mask,
                                 chunk_size=self.chunk_size, span=self.span, scale=1.0)

  def decode_init(self, batch, num_heads, dv):
    return favor.causal_decode_init(batch, num_heads, self.head_dim, dv)

  def decode_step(self, cache, q, k, v):
    return favor.causal_decode_step(cache, q, k, v, None, kernel="elu_plus_one", scale=1.0)
