"""Performer attention (FAVOR+), Sec. 3 and App. A.3/A.4, with redrawn random features.

The projection W is state, not a trained parameter: a `registry.RandomFeatures`
variable (so optimizers over `nnx.Param` skip it and checkpoints keep it),
drawn from (seed, layer, step // redraw_every) and never from data, so every
device, every retrace and a resumed run see the same matrix.

Redrawing: the paper says features are redrawn "periodically" (Sec. 4.2,
App. D.2) without a period; its released code (google-research/performer,
fast_attention/jax/fast_attention.py, `redraw_features=True`) draws new
features at every call. The default, `redraw_every=1`, follows the released
code: a new W for every training step (evaluation keeps the last one).
Generalized kernels can also run without W (`features="deterministic"`,
phi(x) = f(x) + kernel_epsilon), the released code's default for its
generalized attention.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from performer import favor
from performer.attention.registry import RandomFeatures, register


class PerformerAttention(nnx.Module):
  """FAVOR attention with kernel `kernel` and m = num_features random features.

  features: "random" (phi from a projection W of m rows, redrawn every
  `redraw_every` training steps; 0 = never) or "deterministic" (no W, M = d
  features phi(x) = f(x) + kernel_epsilon; generalized kernels only, and
  num_features, projection, scaling and redraw_every are unused).
  """

  default_kernel, default_kernel_epsilon = "positive", 0.0  # for options given as None

  def __init__(self, *, head_dim, layer=0, kernel=None, num_features=256,
               projection="orthogonal", scaling="chi", redraw_every=1, seed=0,
               kernel_epsilon=None, chunk_size=None, features="random"):
    kernel = kernel or self.default_kernel
    kernel_epsilon = self.default_kernel_epsilon if kernel_epsilon is None else kernel_epsilon
    if kernel not in favor.KERNELS:
      raise ValueError(f"unknown kernel {kernel!r}; choose from {favor.KERNELS}")
    if features not in ("random", "deterministic"):
      raise ValueError(f"features must be 'random' or 'deterministic', got {features!r}")
    if features == "deterministic" and kernel not in favor.GENERALIZED_KERNELS:
      raise ValueError(f"kernel {kernel!r} estimates softmax and needs random features")
    self.features = features
    self.kernel, self.kernel_epsilon, self.chunk_size = kernel, kernel_epsilon, chunk_size
    self.head_dim, self.num_features = head_dim, num_features
    self.projection, self.scaling = projection, scaling
    self.layer, self.seed, self.redraw_every = layer, seed, redraw_every
    self.W = RandomFeatures(self.draw(0))

  def draw(self, step):
    """W for training step `step` (an int or a traced integer)."""
    if self.features == "deterministic":
      return jnp.zeros((0, self.head_dim), jnp.float32)  # no W (a placeholder keeps state uniform)
    period = step // self.redraw_every if self.redraw_every else 0
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), self.layer), period)
    return favor.projection(key, self.num_features, self.head_dim, self.projection, self.scaling)

  def redraw(self, step):
    """Sets W to `draw(step)`: call once per training step (never in eval)."""
    self.W[...] = self.draw(step)

  def matrix(self):
    """W, or None for deterministic features."""
    return None if self.features == "deterministic" else self.W[...]

  def __call__(self, q, k, v, *, mask=None, causal=False):
    return favor.favor_attention(q, k, v, self.matrix(), kernel=self.kernel, causal=causal,
                                 mask=mask, chunk_size=self.chunk_size,
                                 kernel_epsilon=self.kernel_epsilon)

  def decode_init(self, batch, num_heads, dv):
    """Empty causal prefix state for `decode_step` (see favor.causal_decode_init)."""
    m = favor.feature_map(jnp.zeros((1, self.head_dim)), self.matrix(), self.kernel).shape[-1]
    return favor.causal_decode_init(batch, num_heads, m, dv)

  def decode_step(self, cache, q, k, v):
    """One token ([B, H, d] each): O(m d) work, the carried K'^T V and K'^T 1 state."""
    return favor.causal_decode_step(cache, q, k, v, self.matrix(), kernel=self.kernel,
                                    kernel_epsilon=self.kernel_epsilon)


@register("performer_softmax", label="Performer-softmax")
class PerformerSoftmax(PerformerAttention):
  """FAVOR+: positive orthogonal random features for softmax (A.3: m=256, redraw on).

  A.3's numerical stabilizer (1e-6 added to features) is not used: favor's
  stabilization is exact (see favor/attention.py), so it would only bias.
  """


@register("performer_relu", label="Performer-ReLU")
class PerformerReLU(PerformerAttention):
  """Generalized kernel attention with ReLU features (A.4: m=256, kernel epsilon 1e-3)."""

  default_kernel, default_kernel_epsilon = "relu", 1e-3

