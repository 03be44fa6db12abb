"""Identity attention: returns V. The paper's "OPT" line of Fig. 3, the speed bound."""

from flax import nnx

from performer.attention.registry import register


@register("identity", label="Identity")
class IdentityAttention(nnx.Module):
  """out = v: no mixing across positions (trivially causal)."""

  def __call__(self, q, k, v, *, mask=None, causal=False):
    del q, k, mask, causal
    return v
