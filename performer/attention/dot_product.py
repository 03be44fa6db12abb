"""Exact attention by `jax.nn.dot_product_attention`: cuDNN flash attention where JAX has it.

cuDNN on an NVIDIA GPU for float16/bfloat16 inputs, else XLA; `implementation(dtype)` says which."""

import jax
import jax.numpy as jnp
from flax import nnx

from performer.attention.registry import register

IMPLEMENTATIONS = ("xla", "cudnn")
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)  # what cuDNN's flash attention takes


def implementation(dtype):
  """The implementation `DotProductAttention` runs for inputs of `dtype` on this machine."""
  on_gpu = jax.default_backend() == "gpu"
  return "cudnn" if on_gpu and jnp.dtype(dtype) in map(jnp.dtype, _CUDNN_DTYPES) else "xla"


@register("exact_dot_product", label="Transformer (jax.nn.dot_product_attention)",
          colour="C8")
class DotProductAttention(nnx.Module):
  """softmax(q k^T / sqrt(d)) v by jax.nn.dot_product_attention (cuDNN or XLA).

  A query with no visible key gets the mean of all values, as
  favor.softmax_attention gives (JAX's own would average the masked keys'
  values only by accident of its mask value). Inputs are checked by the
  registry (`registry._checked`).
  """

  def __call__(self, q, k, v, *, mask=None, causal=False):
    dtype = v.dtype
    q, k = q.astype(dtype), k.astype(dtype)
    bias_mask = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, Lk]
    out = jax.nn.dot_product_attention(q, k, v, mask=bias_mask, is_causal=causal,
                                       implementation=implementation(dtype))
    if mask is None:
      return out
    if causal:  # does query i see a real key j <= i: [B, Lq]
      seen = jnp.cumsum(mask, axis=1) > 0
    else:
      seen = jnp.broadcast_to(jnp.any(mask, axis=1, keepdims=True), q.shape[:2])
    mean = jnp.mean(v.astype(jnp.float32), axis=1, keepdims=True).astype(dtype)  # [B, 1, H, dv]
    return jnp.where(seen[:, :, None, None], out, mean)
