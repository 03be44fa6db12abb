"""Performer attention (FAVOR+), Sec. 3 and App. A.3/A.4, with redrawn random features.

W is state drawn from (seed, layer, step // redraw_every), never from data or trained."""

import jax
import jax.numpy as jnp
from flax import nnx

from performer import favor
from performer.attention.registry import RandomFeatures, register

STATISTICS_DECAY = 0.99  # the running moments' decay per training step (BatchNorm's default)


class Statistics(nnx.Variable):
  """Running moments of a layer's queries and keys (not trained; checkpointed)."""


class PerformerAttention(nnx.Module):
  """FAVOR attention with kernel `kernel` and m = num_features random features.

  features: "random" (phi from a projection W of m rows, redrawn every
  `redraw_every` training steps; 0 = never) or "deterministic" (no W, M = d
  features phi(x) = f(x) + kernel_epsilon, or Based's Taylor map for kernel
  "taylor"; generalized kernels only, and num_features, projection, scaling
  and redraw_every are unused). feature_dim: q and k first pass through a
  learned map to feature_dim dimensions (Based's feature_dim; None: none).
  chunk_size, span, batch_tokens: FAVOR's block lengths (favor.favor_attention;
  None: the platform's, favor.form()). fused: the fused Pallas kernels (True),
  the XLA forms (False) or the platform's choice (None). renormalize: False drops D^-1 (App. D.3;
  generalized kernels only).
  """

  default_kernel, default_kernel_epsilon = "positive", 0.0  # for options given as None

  def __init__(self, *, head_dim, num_heads=1, layer=0, kernel=None, num_features=256,
               projection="orthogonal", scaling="chi", redraw_every=1, seed=0,
               kernel_epsilon=None, chunk_size=None, span=None, batch_tokens=None,
               features="random", feature_dim=None, renormalize=True, fused=None, rngs=None):
    kernel = kernel or self.default_kernel
    kernel_epsilon = self.default_kernel_epsilon if kernel_epsilon is None else kernel_epsilon
    if kernel not in favor.KERNELS:
      raise ValueError(f"unknown kernel {kernel!r}; choose from {favor.KERNELS}")
    if features not in ("random", "deterministic"):
      raise ValueError(f"features must be 'random' or 'deterministic', got {features!r}")
    if features == "deterministic" and kernel not in favor.GENERALIZED_KERNELS:
      raise ValueError(f"kernel {kernel!r} estimates softmax and needs random features")
    if features == "random" and kernel in favor.DETERMINISTIC_ONLY:
      raise ValueError(f"kernel {kernel!r} has no random features: use features='deterministic'")
    if feature_dim is not None and not (isinstance(feature_dim, int) and feature_dim >= 1):
      raise ValueError(f"feature_dim must be an integer >= 1 or None, got {feature_dim!r}")
    favor.numerics.check_renormalize(kernel, renormalize)
    self.features, self.renormalize = features, renormalize
    self.kernel, self.kernel_epsilon = kernel, kernel_epsilon
    # None: the platform's (favor.form())
    self.chunk_size, self.span, self.batch_tokens = chunk_size, span, batch_tokens
    self.fused = fused
    # Based's feature_dim: q and k pass through a learned d -> feature_dim map (shared by the
    # heads) before the feature map, which keeps Taylor's 1 + r + r^2 features affordable.
    self.qk_map = (nnx.Linear(head_dim, feature_dim, use_bias=False, rngs=rngs)
                   if feature_dim else None)
    head_dim = feature_dim or head_dim
    self.head_dim, self.num_features = head_dim, num_features
    self.projection, self.scaling = projection, scaling
    self.layer, self.seed, self.redraw_every = layer, seed, redraw_every
    # Deterministic features keep no W at all (orbax cannot checkpoint an empty placeholder).
    self.W = RandomFeatures(self.draw(0)) if features == "random" else None
    self.use_running_average = False  # model.eval() sets it: running moments stay fixed
    # Data-dependent kernels: decay-weighted sums of moments, and the sum of the weights.
    zeros = lambda *shape: jnp.zeros((num_heads, *shape), jnp.float32)
    self.moments = nnx.data({name: Statistics(value) for name, value in {
        "q_mean": zeros(head_dim), "q_second": zeros(head_dim, head_dim),
        "k_mean": zeros(head_dim), "k_second": zeros(head_dim, head_dim), "weight": zeros(),
    }.items()}) if kernel in favor.DATA_DEPENDENT_KERNELS else None

  def draw(self, step):
    """W for training step `step` (an int or a traced integer)."""
    period = step // self.redraw_every if self.redraw_every else 0
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), self.layer), period)
    return favor.projection(key, self.num_features, self.head_dim, self.projection, self.scaling)

  def redraw(self, step):
    """Sets W to `draw(step)`: call once per training step (never in eval); no-op without W."""
    if self.W is not None:
      self.W[...] = self.draw(step)

  def matrix(self):
    """W, or None for deterministic features."""
    return None if self.W is None else self.W[...]

  @staticmethod
  def state_size(options, seq_len, head_dim, value_dim):
    """K'^T V: M x d_v floats per head, M from the kernel and d_k (the registry's
    BackendInfo.state_size).

    options: the backend's resolved options (registry.options)."""
    del seq_len
    kernel = favor.kernel(options["kernel"])
    M = kernel.num_features(options["num_features"], options.get("feature_dim") or head_dim,
                            deterministic=options.get("features") == "deterministic")
    return M * value_dim

  def statistics(self):
    """(query, key) `favor.exponential.Moments` [H, ...] of the running averages (zero at first)."""
    sums = {name: variable[...] for name, variable in self.moments.items()}
    weight = jnp.maximum(sums["weight"], 1e-30)[:, None]  # [H, 1]
    return tuple(favor.exponential.Moments(sums[f"{x}_mean"] / weight,
                                           sums[f"{x}_second"] / weight[..., None])
                 for x in ("q", "k"))

  def _record(self, q, k, mask):
    """Adds this batch's moments (all its real tokens, per head) to the running averages."""
    scale = self.head_dim ** -0.25
    flat = lambda x: x.reshape(1, -1, *x.shape[2:])  # one sequence of every token: [1, B L, H, d]
    keep = None if mask is None else mask.reshape(1, -1)
    batch = {"weight": 1.0}
    for name, x in (("q", q), ("k", k)):
      mean, second = favor.exponential.moments(flat(x) * scale, keep)
      batch |= {f"{name}_mean": mean[0], f"{name}_second": second[0]}
    for name, variable in self.moments.items():
      variable[...] = STATISTICS_DECAY * variable[...] + (1.0 - STATISTICS_DECAY) * batch[name]

  def _qk(self, q, k):
    return (q, k) if self.qk_map is None else (self.qk_map(q), self.qk_map(k))

  def __call__(self, q, k, v, *, mask=None, causal=False):
    q, k = self._qk(q, k)
    statistics = self.statistics() if self.moments is not None and causal else None
    out = favor.favor_attention(q, k, v, self.matrix(), kernel=self.kernel, causal=causal,
                                mask=mask, chunk_size=self.chunk_size, span=self.span,
                                batch_tokens=self.batch_tokens,
                                kernel_epsilon=self.kernel_epsilon, statistics=statistics,
                                renormalize=self.renormalize, fused=self.fused)
    if statistics is not None and not self.use_running_average:
      self._record(q, k, mask)  # after use: a batch never sees its own statistics
    return out

  def kernel_parameters(self, batch):
    """The (query, key) Sides of a data-dependent kernel from the running moments, [B, H, ...]
    (as decoding and causal attention use them); None for other kernels."""
    if self.moments is None:
      return None
    return tuple(jax.tree.map(lambda a: jnp.broadcast_to(a, (batch, *a.shape)), side)
                 for side in favor.exponential.parameters(self.kernel, *self.statistics()))

  def decode_init(self, batch, num_heads, dv):
    """Empty causal prefix state for `decode_step` (see favor.causal_decode_init)."""
    params = None if self.moments is None else favor.exponential.identity(self.head_dim)
    m = favor.feature_map(jnp.zeros((1, self.head_dim)), self.matrix(), self.kernel,
                          params=params).shape[-1]
    return favor.causal_decode_init(batch, num_heads, m, dv)

  def decode_step(self, cache, q, k, v):
    """One token ([B, H, d] each): O(m d) work, the carried K'^T V and K'^T 1 state."""
    q, k = self._qk(q, k)
    return favor.causal_decode_step(cache, q, k, v, self.matrix(), kernel=self.kernel,
                                    kernel_epsilon=self.kernel_epsilon,
                                    params=self.kernel_parameters(q.shape[0]),
                                    renormalize=self.renormalize)


@register("performer_softmax", label="Performer-softmax", colour="C0")
class PerformerSoftmax(PerformerAttention):
  """FAVOR+: positive orthogonal random features for softmax (A.3: m=256, redraw on).

  A.3's numerical stabilizer (1e-6 added to features) is not used: favor's
  stabilization is exact (see favor/attention.py), so it would only bias.
  """


@register("performer_relu", label="Performer-ReLU", colour="C2")
class PerformerReLU(PerformerAttention):
  """Generalized kernel attention with ReLU features (A.4: m=256, kernel epsilon 1e-3)."""

  default_kernel, default_kernel_epsilon = "relu", 1e-3


@register("performer_favorpp", label="Performer-FAVOR++", colour="C9")
class PerformerFavorPP(PerformerAttention):
  """FAVOR++: GERF features with the variance-minimising A* (arXiv 2205.15317)."""

  default_kernel = "gerf"


@register("performer_favorsharp", label="Performer-FAVOR#", colour="C6")
class PerformerFavorSharp(PerformerAttention):
  """FAVOR#: SADERF features, GERF after a per-coordinate rescaling Psi (arXiv 2302.00787)."""

  default_kernel = "saderf"
