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

Speed. Both passes read the sequence in blocks under `lax.scan` and compute
features inside each block, so only [B, H, block, M] features exist at a
time (they stay in cache) and the backward pass recomputes them
(`jax.checkpoint`) rather than storing L x M. Block lengths were chosen by
measurement on a 2-core CPU (XLA:CPU, float32, L = 8192, d = 64, m = 256,
8 heads, fwd+bwd; results/speed_chunks_cpu.json): causal chunks of 128
(303 ms, against 370 at 32, 325 at 64, 393 at 256 and 926 at 1024: the
intra-chunk C x C part grows with C, the per-chunk overhead with L / C);
bidirectional blocks of 512 (205 ms; 197-208 ms anywhere from 128 to 512,
within run-to-run noise, against 267 at 64 and 228 at 1024; 512 needs the
fewest loop steps). Accelerators were not measured.
"""

import functools

import jax
import jax.numpy as jnp

from performer.favor import features

DEFAULT_CHUNK_SIZE = 128
BIDIRECTIONAL_BLOCK = 512
# A per-feature reference below any real log: no key seen yet.
_NO_KEY = -1e30
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
    chunk_size: length of the blocks the sequence is read in (default
      `DEFAULT_CHUNK_SIZE` causal, `BIDIRECTIONAL_BLOCK` bidirectional); L
      need not be a multiple of it. Changes speed, not results (beyond
      float rounding).
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
  features.feature_parts(jnp.zeros((1, q.shape[-1])), W, kernel)  # argument errors, early
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  featurize = lambda x: features.feature_parts(x * scale, W, kernel, kernel_epsilon=kernel_epsilon)
  if mask is None:
    mask = jnp.ones(k.shape[:2], bool)
  dtype = v.dtype
  q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
  if causal:
    chunk = min(chunk_size or DEFAULT_CHUNK_SIZE, q.shape[1])
    out = _causal(q, k, v, mask, featurize, chunk)
  else:
    block = min(chunk_size or BIDIRECTIONAL_BLOCK, max(q.shape[1], k.shape[1]))
    out = _bidirectional(q, k, v, mask, featurize, block)
  return out.astype(dtype)


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


def _bidirectional(q, k, v, mask, featurize, block):
  """Eq. (4) block by block, with the per-feature reference of the module docstring.

  Keys are read in blocks of `block`, keeping K'^T V and K'^T 1 against a
  running per-feature maximum c_f (a rescale when it grows, as in online
  softmax); queries are then read in blocks against the final state. Only
  [B, H, block, M] features exist at a time, so they stay in cache, and the
  backward pass recomputes them (`jax.checkpoint`) instead of storing L x M.
  """
  batch, _, heads, dv = v.shape
  q_blocks, k_blocks, v_blocks = _blocks(q, block), _blocks(k, block), _blocks(v, block)
  keep_blocks = _blocks(mask[:, :, None, None], block)[..., 0, 0][:, :, None]  # [n, B, 1, block]
  size = featurize(k_blocks[0, :, :1])
  m = (size.value if size.value is not None else size.log).shape[-1]

  @jax.checkpoint
  def key_block(carry, xs):
    kv, z, c = carry  # [B, H, M, dv], [B, H, M], [B, H, M or 1]
    k_blk, v_blk, keep = xs  # [B, C, H, d], [B, C, H, dv], [B, 1, C]
    kf, v_blk = featurize(_heads_first(k_blk)), _heads_first(v_blk)
    keep = keep[..., None]
    if kf.log is None:
      k_prime = jnp.where(keep, kf.value, 0.0)
    else:
      k_log = jnp.where(keep, kf.log, -jnp.inf)
      c_new = jax.lax.stop_gradient(jnp.maximum(c, jnp.max(k_log, axis=2)))
      decay = jnp.exp(c - c_new)
      kv, z = kv * decay[..., None], z * decay
      k_prime = _times(kf.value, jnp.exp(k_log - c_new[:, :, None]))
      c = c_new
    return (kv + jnp.einsum("bhcm,bhcd->bhmd", k_prime, v_blk), z + jnp.sum(k_prime, 2), c), None

  c0 = jnp.full((batch, heads, 1 if size.log is None else size.log.shape[-1]), _NO_KEY,
                jnp.float32)
  kv0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  (kv, z, c), _ = jax.lax.scan(key_block, (kv0, jnp.zeros((batch, heads, m)), c0),
                               (k_blocks, v_blocks, keep_blocks))

  @jax.checkpoint
  def query_block(_, q_blk):
    qf = featurize(_heads_first(q_blk))
    if qf.log is None:
      q_prime = qf.value
    else:
      q_log = qf.log + c[:, :, None]
      q_prime = _times(qf.value, jnp.exp(q_log - jax.lax.stop_gradient(
          jnp.max(q_log, -1, keepdims=True))))
    return None, _heads_first(_divide(jnp.einsum("bhcm,bhmd->bhcd", q_prime, kv),
                                      jnp.einsum("bhcm,bhm->bhc", q_prime, z)))

  _, out = jax.lax.scan(query_block, None, q_blocks)
  return _unblock(out, q.shape[1])


def _causal(q, k, v, mask, featurize, chunk):
  """App. B.1 chunk by chunk under `lax.scan` (see the module docstring).

  Features are computed inside each chunk (and recomputed in the backward
  pass), so no L x M array is ever stored.
  """
  batch, length, heads, dv = v.shape
  # First reference: the first real key's largest log, for every feature.
  # Keys of similar norm rarely exceed it by much, which keeps chunk 0
  # exact for far larger norms than the first key's own per-feature logs.
  first = jnp.argmax(mask, axis=1)[:, None, None, None]  # [B, 1, 1, 1]
  first_k = jnp.moveaxis(jnp.take_along_axis(k, first, axis=1), 1, 2)  # [B, H, 1, d]
  size = featurize(first_k)
  m = (size.value if size.value is not None else size.log).shape[-1]
  c0 = None
  if size.log is not None:
    c0 = jnp.max(size.log[:, :, 0], -1, keepdims=True)  # [B, H, 1]
    c0 = jax.lax.stop_gradient(jnp.broadcast_to(c0, (batch, heads, size.log.shape[-1])))
  s0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  z0 = jnp.zeros((batch, heads, m), jnp.float32)
  xs = (_blocks(q, chunk), _blocks(k, chunk), _blocks(v, chunk),
        _blocks(mask[:, :, None, None], chunk)[..., 0, 0][:, :, None])
  step = jax.checkpoint(functools.partial(_causal_chunk, featurize))
  _, out = jax.lax.scan(step, (s0, z0, c0), xs)
  return _unblock(out, length)


def _causal_chunk(featurize, carry, xs):
  """One chunk: intra-chunk quadratic part plus the carried prefix state."""
  s, z, c = carry  # K'^T V [B, H, M, dv], K'^T 1 [B, H, M], [B, H, M or 1] or None
  q_blk, k_blk, v, keep = xs  # [B, C, H, d], [B, C, H, d], [B, C, H, dv], [B, 1, C]
  qf, kf, v = featurize(_heads_first(q_blk)), featurize(_heads_first(k_blk)), _heads_first(v)
  chunk = v.shape[2]
  keep = keep[..., None]
  sg = jax.lax.stop_gradient
  if kf.log is None:
    q_prime = qf.value
    k_prime = k_state = jnp.where(keep, kf.value, 0.0)  # [B, H, C, M]
  else:
    k_log = jnp.where(keep, kf.log, -jnp.inf)
    c_prev = c[:, :, None]  # [B, H, 1, M or 1]: reference of the carried state
    c_t = sg(_prefix_max(k_log, c_prev))  # c_f(t), causal
    n_t = sg(jnp.max(qf.log + c_t, axis=-1, keepdims=True))  # N_t: [B, H, C, 1]
    q_prime = _times(qf.value, jnp.exp(qf.log + c_prev - n_t))  # <= 1
    rel = k_log - c_prev  # each key's growth over earlier chunks
    key_scale = sg(jnp.maximum(jnp.max(rel, axis=-1) - _HEADROOM, 0.0))  # s_j: [B, H, C]
    k_prime = _times(kf.value, jnp.exp(rel - key_scale[..., None]))  # <= e^60
    c = c_t[:, :, -1]  # [B, H, M or 1]: reference for the next state
    k_state = _times(kf.value, jnp.exp(k_log - c[:, :, None]))  # <= 1

  scores = jnp.einsum("bhtm,bhjm->bhtj", q_prime, k_prime)  # [B, H, C, C]
  if kf.log is not None:  # undo s_j (capped: past the cap the terms underflowed)
    scores = scores * jnp.exp(jnp.minimum(key_scale, 80.0))[:, :, None, :]
  scores = jnp.where(jnp.tril(jnp.ones((chunk, chunk), bool)), scores, 0.0)
  num = (jnp.einsum("bhtj,bhjd->bhtd", scores, v)  # [B, H, C, dv]
         + jnp.einsum("bhtm,bhmd->bhtd", q_prime, s))
  den = jnp.sum(scores, axis=-1) + jnp.einsum("bhtm,bhm->bht", q_prime, z)  # [B, H, C]

  if kf.log is not None:  # rebase the state from c_prev to the new reference
    decay = jnp.exp(c_prev[:, :, 0] - c)  # [B, H, M or 1], <= 1
    s, z = s * decay[..., None], z * decay
  s = s + jnp.einsum("bhjm,bhjd->bhmd", k_state, v)
  z = z + jnp.sum(k_state, axis=2)
  return (s, z, c), _heads_first(_divide(num, den))


def _prefix_max(x, start):
  """max(start, x[..., :t+1, :]) along axis 2 for every t: c_f(t) of a chunk.

  On CPU a sequential scan over the C positions, which measured 1.6x faster
  per chunk than lax.cummax's lowering there; elsewhere lax.cummax, whose
  parallel scan suits accelerators. Max is exact, so both give the same bits.
  """
  if jax.default_backend() != "cpu":
    return jnp.maximum(start, jax.lax.cummax(x, axis=2))
  xs = jnp.moveaxis(x, 2, 0)
  _, out = jax.lax.scan(lambda c, r: (jnp.maximum(c, r),) * 2,
                        jnp.broadcast_to(start[:, :, 0], xs.shape[1:]), xs)
  return jnp.moveaxis(out, 0, 2)


def _blocks(x, block):
  """[B, L, H, e] -> [n, B, block, H, e], zero-padded to n * block >= L.

  Heads stay inside a block: for B = 1 this is a free reshape, where a
  head-major layout measured a copy of each input and of the output.
  """
  batch, length, heads, e = x.shape
  n = -(-length // block)
  x = jnp.pad(x, [(0, 0), (0, n * block - length), (0, 0), (0, 0)])
  return jnp.moveaxis(x.reshape(batch, n, block, heads, e), 1, 0)


def _unblock(x, length):
  """[n, B, block, H, e] -> [B, length, H, e]: the inverse of `_blocks`."""
  n, batch, block, heads, e = x.shape
  return jnp.moveaxis(x, 0, 1).reshape(batch, n * block, heads, e)[:, :length]


def _heads_first(x):
  """[B, C, H, e] -> [B, H, C, e] inside a block (in cache), and back."""
  return jnp.swapaxes(x, 1, 2)


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
