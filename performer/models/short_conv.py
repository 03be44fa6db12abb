"""A gated causal short convolution: Zoology's BaseConv (Arora et al. 2023, Sec. 4).

Before attention it hands each token its predecessors' content, so a value sees its key."""

import jax
import jax.numpy as jnp
from flax import nnx


class ShortConv(nnx.Module):
  """x [B, L, D] -> y [B, L, D], causal; decode_step advances one token with a [B, K-1, D] cache.

  Args:
    features: D.
    kernel: K >= 1, the positions each output reads (Zoology: 3).
    dtype: of the computation; parameters stay float32.
  """

  def __init__(self, features, kernel, *, dtype=jnp.float32, rngs):
    self.dtype = dtype
    # Tap j multiplies position t - (K-1) + j; initialised as a depthwise nnx.Conv (fan-in K).
    init = jax.nn.initializers.lecun_normal()(rngs.params(), (kernel, 1, features))
    self.kernel = nnx.Param(init[:, 0])
    self.bias = nnx.Param(jnp.zeros((features,)))
    self.gate = nnx.Linear(features, features, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    # K shifted multiply-adds: on the CPU, XLA's grouped convolution took most of an MQAR step.
    taps, length = self.kernel[...].astype(self.dtype), x.shape[1]
    padded = jnp.pad(x.astype(self.dtype), ((0, 0), (len(taps) - 1, 0), (0, 0)))
    y = sum(padded[:, j:j + length] * taps[j] for j in range(len(taps)))
    return (y + self.bias[...].astype(self.dtype)) * self.gate(x)

  def decode_init(self, batch, features, dtype=jnp.float32):
    """The last K - 1 inputs before the first token: zeros, [B, K-1, D]."""
    return jnp.zeros((batch, self.kernel.shape[0] - 1, features), dtype)

  def decode_step(self, cache, x):
    """x [B, D] at the next position -> (cache, y [B, D]); equals __call__ on the whole prefix."""
    window = jnp.concatenate([cache.astype(x.dtype), x[:, None]], axis=1)  # [B, K, D]
    y = jnp.einsum("bkd,kd->bd", window, self.kernel[...].astype(x.dtype))
    return window[:, 1:], (y + self.bias[...].astype(x.dtype)) * self.gate(x)
