"""Exact softmax attention and FAVOR (random-feature) attention.

Shapes follow Flax: q, k, v are [B, L, H, d] (batch, length, heads, head dim);
a key padding mask is [B, L] bool, True = real token. Sources: Eq. (1)-(2)
(exact), Eq. (4) (bidirectional FAVOR), App. B.1 (causal FAVOR by prefix sums).

Numerics. phi(x) = value * exp(log) (features.py). Before exponentiating,
a per-feature reference c_f is subtracted from the keys' logs and added to
the queries' logs, and each query t is then normalised by its own maximum
N_t = max_f(a_tf + c_f): every factor is <= 1, and phi(q).phi(k) changes only
by exp(N_t), which the normaliser D cancels. The estimator is therefore
exactly the unstabilized one, nothing overflows, and large-norm inputs keep
their dominant terms.

Causal pass: the carried state uses c_f from earlier chunks (chunk 0 starts
from the first key's largest log), and N_t uses c_f(t), the per-feature
prefix maximum over keys <= t, which puts N_t within log M of query t's
largest attention weight. Every constant used at position t depends only on
tokens <= t, so outputs never depend on later tokens, not even through
rounding. Inside a chunk a key may outgrow the carried c_f by 60 nats before
it needs a scale of its own; past about 140 nats of growth within one chunk,
terms underflow. Measured in float32: exact to ~1e-5 for scaled query/key
norms |x| up to ~15 (logits q.k/sqrt(d) of a few hundred), NaN beyond ~20.
The bidirectional pass has no such limit.

All sums (K'^T V, K'^T 1, D) accumulate in float32 whatever the input dtype.
"""

import jax
import jax.numpy as jnp

from performer.favor import features

DEFAULT_CHUNK_SIZE = 64
# A key may exceed the carried reference by this many nats before it needs a
# scale of its own; e^60 times m features times |v| stays inside float32.
_HEADROOM = 60.0


def softmax_attention(q, k, v, *, causal=False, mask=None):
  """Exact softmax attention, Eq. (1) and (2): the reference.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; v: [B, Lk, H, dv]; any float dtype.
    causal: query i attends to keys j <= i (needs Lq == Lk).
    mask: [B, Lk] bool key padding mask, True = real token, or None.

  Returns:
    [B, Lq, H, dv] in v's dtype; computed in float32 with logits
    q.k / sqrt(d). A query with no visible key gets the mean of all values.

  Raises:
    ValueError: inconsistent shapes.
  """
  _check_shapes(q, k, v, mask, causal)
  d = q.shape[-1]
  logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32),
                      k.astype(jnp.float32)) / jnp.sqrt(jnp.float32(d))
  allowed = jnp.ones(logits.shape[-2:], bool)
  if causal:
    allowed = jnp.tril(allowed)
  if mask is not None:
    allowed = allowed & mask[:, None, None, :]
  logits = jnp.where(allowed, logits, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1)  # [B, H, Lq, Lk]
  out = jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32))
  return out.astype(v.dtype)


def favor_attention(q, k, v, W, *, kernel="positive", causal=False, mask=None,
                    chunk_size=None, scale=None, kernel_epsilon=0.0):
  """FAVOR attention: D^-1 (Q' ((K')^T V)), Eq. (4); causal via App. B.1.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; v: [B, Lk, H, dv]; any float dtype.
    W: [m, d] from `projection`; None only for generalized kernels.
    kernel: one of `features.KERNELS` (`positive` is FAVOR+).
    causal: unidirectional attention (needs Lq == Lk), computed chunk by
      chunk: masked quadratic attention inside a chunk plus a running
      K'^T V and K'^T 1 state; never forms an L x L or L x m x dv tensor.
    mask: [B, Lk] bool key padding mask (True = real token) or None. Padded
      keys enter neither the numerator nor D.
    chunk_size: causal chunk length (default `DEFAULT_CHUNK_SIZE`); L need
      not be a multiple of it.
    scale: factor applied to q and k before the feature map; default
      d^(-1/4), so softmax kernels estimate exp(q.k / sqrt(d)).
    kernel_epsilon: see `features.feature_parts`.

  Returns:
    [B, Lq, H, dv] in v's dtype (features and sums in float32). A query
    whose normaliser D is exactly 0 (e.g. relu features all zero) gets 0.

  Raises:
    ValueError: inconsistent shapes, unknown kernel, missing W, chunk_size < 1.
  """
  _check_shapes(q, k, v, mask, causal)
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
  qf, kf = _features(q, k, W, kernel, scale, kernel_epsilon)
  if mask is None:
    mask = jnp.ones(k.shape[:2], bool)
  v32 = v.astype(jnp.float32)
  if causal:
    out = _causal(qf, kf, v32, mask, chunk_size or DEFAULT_CHUNK_SIZE)
  else:
    out = _bidirectional(qf, kf, v32, mask)
  return out.astype(v.dtype)


def causal_linear_attention_scan(q_prime, k_prime, v):
  """Per-token prefix-sum causal linear attention (App. B.1): the oracle.

  out_i = (q'_i . sum_{j<=i} k'_j v_j^T) / (q'_i . sum_{j<=i} k'_j), one
  `lax.scan` step per token, no stabilization. Slow; kept as the test oracle
  and the reference path for speed comparisons.

  Args:
    q_prime, k_prime: [B, L, H, M] explicit features (`feature_map`).
    v: [B, L, H, dv].

  Returns:
    [B, L, H, dv] float32.
  """
  q_prime, k_prime, v = (a.astype(jnp.float32) for a in (q_prime, k_prime, v))
  batch, _, heads, m = k_prime.shape
  s0 = jnp.zeros((batch, heads, m, v.shape[-1]), jnp.float32)
  z0 = jnp.zeros((batch, heads, m), jnp.float32)

  def step(carry, qkv):
    s, z = carry
    qi, ki, vi = qkv  # [B, H, M], [B, H, M], [B, H, dv]
    s = s + jnp.einsum("bhm,bhd->bhmd", ki, vi)
    z = z + ki
    num = jnp.einsum("bhm,bhmd->bhd", qi, s)
    return (s, z), num / jnp.einsum("bhm,bhm->bh", qi, z)[..., None]

  xs = tuple(jnp.moveaxis(a, 1, 0) for a in (q_prime, k_prime, v))
  _, out = jax.lax.scan(step, (s0, z0), xs)  # [L, B, H, dv]
  return jnp.moveaxis(out, 0, 1)


def causal_decode_init(batch, heads, num_features, dv):
  """The empty prefix state for `causal_decode_step`: (S, z, c), float32.

  S: [B, H, M, dv] sum of k'_j v_j^T; z: [B, H, M] sum of k'_j; c: [B, H, M]
  their log-scale reference (-inf: no token yet). M is the feature dimension
  (2m for hyperbolic and trig, d for generalized kernels without W).
  """
  return (jnp.zeros((batch, heads, num_features, dv), jnp.float32),
          jnp.zeros((batch, heads, num_features), jnp.float32),
          jnp.full((batch, heads, num_features), -jnp.inf, jnp.float32))


def causal_decode_step(state, q, k, v, W, *, kernel="positive", scale=None, kernel_epsilon=0.0):
  """One token of causal FAVOR attention in O(M dv) work: App. B.1's prefix sums.

  Args:
    state: (S, z, c) from `causal_decode_init` or the previous step.
    q, k, v: [B, H, d] (v: [B, H, dv]) of the new token; W, kernel, scale and
      kernel_epsilon as in `favor_attention`.

  Returns:
    (new state, out [B, H, dv] in v's dtype): out equals row t of
    favor_attention(..., causal=True) for the sequence decoded so far.
  """
  s, z, c = state
  qf, kf = _features(q, k, W, kernel, scale, kernel_epsilon)
  v32 = v.astype(jnp.float32)
  if kf.log is None:
    q_prime, k_prime = qf.value, kf.value
  else:  # the per-feature reference grows to include this key; rebase the state
    k_log = jnp.broadcast_to(kf.log, c.shape)
    first = jnp.broadcast_to(jnp.max(k_log, -1, keepdims=True), c.shape)
    c_prev = jnp.where(jnp.isfinite(c), c, first)
    c_new = jnp.maximum(c_prev, k_log)
    decay = jnp.exp(c_prev - c_new)
    s, z = s * decay[..., None], z * decay
    q_log = jnp.broadcast_to(qf.log, c.shape) + c_new
    q_prime = _times(qf.value, jnp.exp(q_log - jnp.max(q_log, -1, keepdims=True)))
    k_prime = _times(kf.value, jnp.exp(k_log - c_new))
    c = c_new
  s = s + jnp.einsum("bhm,bhd->bhmd", k_prime, v32)
  z = z + k_prime
  out = _divide(jnp.einsum("bhm,bhmd->bhd", q_prime, s), jnp.einsum("bhm,bhm->bh", q_prime, z))
  return (s, z, c), out.astype(v.dtype)


def _bidirectional(qf, kf, v, mask):
  """Eq. (4) with the per-feature reference of the module docstring."""
  keep = mask[:, :, None, None]  # [B, L, 1, 1]
  if kf.log is None:
    q_prime = qf.value
    k_prime = jnp.where(keep, kf.value, 0.0)
  else:
    k_log = jnp.where(keep, kf.log, -jnp.inf)
    c = jnp.max(k_log, axis=1, keepdims=True)  # [B, 1, H, M or 1]
    c = jax.lax.stop_gradient(jnp.where(jnp.isfinite(c), c, 0.0))
    q_log = qf.log + c
    q_log = q_log - jax.lax.stop_gradient(jnp.max(q_log, -1, keepdims=True))
    q_prime = _times(qf.value, jnp.exp(q_log))
    k_prime = _times(kf.value, jnp.exp(k_log - c))
  kv = jnp.einsum("blhm,blhd->bhmd", k_prime, v)  # [B, H, M, dv]
  z = jnp.sum(k_prime, axis=1)  # [B, H, M]
  num = jnp.einsum("blhm,bhmd->blhd", q_prime, kv)  # [B, L, H, dv]
  den = jnp.einsum("blhm,bhm->blh", q_prime, z)  # [B, L, H]
  return _divide(num, den)


def _causal(qf, kf, v, mask, chunk_size):
  """App. B.1, chunk by chunk under `lax.scan` (see the module docstring)."""
  batch, length, heads, dv = v.shape
  chunk = min(chunk_size, length)
  n_chunks = -(-length // chunk)
  pad = n_chunks * chunk - length

  def chunks(x):  # [B, L, ...] -> [n_chunks, B, chunk, ...]
    if x is None:
      return None
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    x = x.reshape((batch, n_chunks, chunk) + x.shape[2:])
    return jnp.moveaxis(x, 1, 0)

  m = (kf.value if kf.value is not None else kf.log).shape[-1]
  s0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  z0 = jnp.zeros((batch, heads, m), jnp.float32)
  c0 = None
  if kf.log is not None:
    # First reference: the first real key's largest log, for every feature.
    # Keys of similar norm rarely exceed it by much, which keeps chunk 0
    # exact for far larger norms than the first key's own per-feature logs.
    first = jnp.argmax(mask, axis=1)[:, None, None, None]  # [B, 1, 1, 1]
    c0 = jnp.take_along_axis(kf.log, first, axis=1)[:, 0]  # [B, H, M or 1]
    c0 = jax.lax.stop_gradient(jnp.broadcast_to(jnp.max(c0, -1, keepdims=True), c0.shape))
  xs = (chunks(qf.value), chunks(qf.log), chunks(kf.value), chunks(kf.log),
        chunks(v), chunks(mask))
  _, out = jax.lax.scan(_causal_chunk, (s0, z0, c0), xs)
  out = jnp.moveaxis(out, 0, 1).reshape(batch, n_chunks * chunk, heads, dv)
  return out[:, :length]


def _causal_chunk(carry, xs):
  """One chunk: intra-chunk quadratic part plus the carried prefix state."""
  s, z, c = carry  # [B, H, M, dv], [B, H, M], [B, H, M or 1] or None
  q_val, q_log, k_val, k_log, v, mask = xs  # [B, C, H, ...], mask [B, C]
  chunk = v.shape[1]
  keep = mask[:, :, None, None]
  sg = jax.lax.stop_gradient
  if k_log is None:
    q_prime = q_val
    k_prime = k_state = jnp.where(keep, k_val, 0.0)  # [B, C, H, M]
  else:
    k_log = jnp.where(keep, k_log, -jnp.inf)
    c_prev = c[:, None]  # [B, 1, H, M or 1]: reference of the carried state
    c_t = sg(jnp.maximum(c_prev, jax.lax.cummax(k_log, axis=1)))  # c_f(t), causal
    n_t = sg(jnp.max(q_log + c_t, axis=-1, keepdims=True))  # N_t: [B, C, H, 1]
    q_prime = _times(q_val, jnp.exp(q_log + c_prev - n_t))  # <= 1
    rel = k_log - c_prev  # each key's growth over earlier chunks
    key_scale = sg(jnp.maximum(jnp.max(rel, axis=-1) - _HEADROOM, 0.0))  # s_j
    k_prime = _times(k_val, jnp.exp(rel - key_scale[..., None]))  # <= e^60
    c = c_t[:, -1]  # [B, H, M or 1]: reference for the next state
    k_state = _times(k_val, jnp.exp(k_log - c[:, None]))  # <= 1

  scores = jnp.einsum("bthm,bjhm->bhtj", q_prime, k_prime)  # [B, H, C, C]
  if k_log is not None:  # undo s_j (capped: past the cap the terms underflowed)
    sj = jnp.moveaxis(key_scale, 1, 2)[..., None, :]  # [B, H, 1, C]
    scores = scores * jnp.exp(jnp.minimum(sj, 80.0))
  scores = jnp.where(jnp.tril(jnp.ones((chunk, chunk), bool)), scores, 0.0)
  num = (jnp.einsum("bhtj,bjhd->bthd", scores, v)  # [B, C, H, dv]
         + jnp.einsum("bthm,bhmd->bthd", q_prime, s))
  den = (jnp.sum(scores, axis=-1).transpose(0, 2, 1)  # [B, C, H]
         + jnp.einsum("bthm,bhm->bth", q_prime, z))
  out = _divide(num, den)

  if k_log is not None:  # rebase the state from c_prev to the new reference
    decay = jnp.exp(c_prev[:, 0] - c)  # [B, H, M or 1], <= 1
    s, z = s * decay[..., None], z * decay
  s = s + jnp.einsum("bjhm,bjhd->bhmd", k_state, v)
  z = z + jnp.sum(k_state, axis=1)
  return (s, z, c), out


def _features(q, k, W, kernel, scale, kernel_epsilon):
  """Split-form features of q and k after scaling them (default d^(-1/4)), in float32."""
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  return tuple(features.feature_parts(x.astype(jnp.float32) * scale, W, kernel,
                                      kernel_epsilon=kernel_epsilon) for x in (q, k))


def _divide(num, den):
  """num / D; a query with D = 0 (no weight on any key) gets 0, not NaN.

  Zero-padded chunk rows have all-zero features: a NaN there, though sliced
  off, would poison the backward pass.
  """
  zero = den == 0.0
  return jnp.where(zero[..., None], 0.0, num / jnp.where(zero, 1.0, den)[..., None])


def _times(value, scale):
  """value * scale, with value None read as 1."""
  return scale if value is None else value * scale


def _check_shapes(q, k, v, mask, causal):
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError("q, k, v must be [batch, length, heads, head_dim], got "
                     f"shapes {q.shape}, {k.shape}, {v.shape}")
  if q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
    raise ValueError(f"q {q.shape} and k {k.shape} disagree on batch, heads or d")
  if k.shape[:3] != v.shape[:3]:
    raise ValueError(f"k {k.shape} and v {v.shape} disagree on batch, length or heads")
  if causal and q.shape[1] != k.shape[1]:
    raise ValueError(f"causal attention needs Lq == Lk, got {q.shape[1]} and {k.shape[1]}")
  if mask is not None and tuple(mask.shape) != tuple(k.shape[:2]):
    raise ValueError(f"mask must be [batch, Lk] = {k.shape[:2]}, got {mask.shape}")
