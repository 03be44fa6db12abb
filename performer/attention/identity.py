"""Identity attention: returns V. The paper's "OPT" line of Fig. 3, the speed bound."""

from flax import nnx

from performer.attention.registry import register


@register("identity", label="Identity", colour="k")
class IdentityAttention(nnx.Module):
  """out = v: no mixing across positions (trivially causal)."""

  @staticmethod
  def state_size(options, seq_len, head_dim, value_dim):
    """None kept: 0 floats (the registry's BackendInfo.state_size)."""
    del options, seq_len, head_dim, value_dim
    return 0

  def __call__(self, q, k, v, *, mask=None, causal=False):
    del q, k, mask, causal
    return v
