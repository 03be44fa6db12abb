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

Causal pass: c_f(t) is the per-feature maximum over keys <= t, so N_t is
exactly query t's largest term. A chunk is computed in one product against
one reference, c_f at its first position; a key may outgrow it by 60 nats
(`_HEADROOM`). From the first key that grows further, the chunk's queries are
recomputed token by token with the reference updated at every key (the
decoding recursion, `_token_update`), which is exact at any growth; the
carried state always moves to the chunk's last c_f, where every stored term
is <= 1. Every constant used at position t, the choice of path included,
depends only on tokens <= t, so outputs never depend on later tokens, not
even through rounding.

Limit. The logs are about |x|^2 / 2 for a scaled query or key x = q d^(-1/4),
and float32 resolves them to ~|x|^2 6e-8 nats, so the error grows as |x|^2.
Measured against a float64 evaluation of the same estimator (d = 16,
m = 32-64, L = 200-300), both passes: relative error ~1e-6 at |x| = 5-20,
1e-5 at 40-80, 1e-4 at 100, 5e-4 at 300. Past `MAX_NORM` = 100 the result is
refused: a direct call raises ValueError, and under jit the outputs of such
a query, and of every query that sees such a key, are NaN.

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
import math

import jax
import jax.numpy as jnp

from performer.favor import features

DEFAULT_CHUNK_SIZE = 128
BIDIRECTIONAL_BLOCK = 512
# Largest scaled query/key norm |q| d^(-1/4) served (see Limit above).
MAX_NORM = 100.0
# A per-feature reference below any real log: no key seen yet (finite, so
# that differences of two such references are 0, not NaN).
_NO_KEY = -1e30
# A key may exceed the chunk's reference by this many nats: e^60 times m
# features times C keys times |v| stays inside float32, and a query factor
# e^-60 times a term's own e^-27 stays a normal number.
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
    Under jit, NaN where a scaled norm passes `MAX_NORM` (see Raises).

  Raises:
    ValueError: inconsistent shapes, unknown kernel, missing W, chunk_size < 1;
      for concrete (not traced) inputs, a query or real key whose scaled norm
      |x| d^(-1/4) exceeds `MAX_NORM` with an exponential kernel.
  """
  _check_shapes(q, k, v, mask, causal)
  if chunk_size is not None and chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
  features.feature_parts(jnp.zeros((1, q.shape[-1])), W, kernel)  # argument errors, early
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  if mask is None:
    mask = jnp.ones(k.shape[:2], bool)
  if kernel in EXPONENTIAL_KERNELS and not any(isinstance(x, jax.core.Tracer) for x in (q, k, mask)):
    _check_norms(q, k, mask, scale)
  if causal:
    block = min(chunk_size or DEFAULT_CHUNK_SIZE, q.shape[1])
  else:
    block = min(chunk_size or BIDIRECTIONAL_BLOCK, max(q.shape[1], k.shape[1]))
  return _favor(q, k, v, W, mask, kernel=kernel, causal=causal, block=block, scale=scale,
                kernel_epsilon=kernel_epsilon)


# Compiled once per shape and setting, so that eager calls do not retrace the scans.
@functools.partial(jax.jit, static_argnames=("kernel", "causal", "block", "scale", "kernel_epsilon"))
def _favor(q, k, v, W, mask, *, kernel, causal, block, scale, kernel_epsilon):
  featurize = functools.partial(_featurize, W=W, kernel=kernel, scale=scale,
                                kernel_epsilon=kernel_epsilon)
  dtype = v.dtype
  q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
  run = _causal if causal else _bidirectional
  return run(q, k, v, mask, featurize, block).astype(dtype)


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
  the per-feature maximum of the keys' logs so far, their reference
  (`_NO_KEY`: no token yet). M is the feature dimension (2m for hyperbolic
  and trig, d for generalized kernels without W).
  """
  return (jnp.zeros((batch, heads, num_features, dv), jnp.float32),
          jnp.zeros((batch, heads, num_features), jnp.float32),
          jnp.full((batch, heads, num_features), _NO_KEY, jnp.float32))


def causal_decode_step(state, q, k, v, W, *, kernel="positive", scale=None, kernel_epsilon=0.0):
  """One token of causal FAVOR attention in O(M dv) work: App. B.1's prefix sums.

  Args:
    state: (S, z, c) from `causal_decode_init` or the previous step.
    q, k, v: [B, H, d] (v: [B, H, dv]) of the new token; W, kernel, scale and
      kernel_epsilon as in `favor_attention`.

  Returns:
    (new state, out [B, H, dv] in v's dtype): out equals row t of
    favor_attention(..., causal=True) for the sequence decoded so far. A
    token whose scaled norm exceeds `MAX_NORM` makes its output and every
    later one NaN.
  """
  qf, kf = _features(q, k, W, kernel, scale, kernel_epsilon)
  state, out = _token_update(state, qf, kf, v.astype(jnp.float32))
  return state, out.astype(v.dtype)


def _token_update(state, qf, kf, v):
  """Adds one key to the prefix state and reads one query against it: exact at any norm.

  qf, kf: `Features` of [B, H, M] (logs [B, H, M], [B, H, 1] or None); v:
  [B, H, dv] float32. The reference c grows to the per-feature maximum of
  the keys so far, so every stored term is <= 1 and the query is normalised
  by its largest term: the largest product q'.k' is exactly 1.
  """
  s, z, c = state
  if kf.log is None:
    q_prime, k_prime = qf.value, kf.value
  else:
    c_new = jnp.maximum(c, kf.log)  # a masked key has log -inf: c stays
    decay = jnp.exp(c - c_new)
    s, z = s * decay[..., None], z * decay
    q_log = qf.log + c_new
    q_prime = _times(qf.value, jnp.exp(q_log - jnp.max(q_log, -1, keepdims=True)))
    k_prime = _times(kf.value, jnp.exp(kf.log - c_new))
    c = c_new
  s = s + jnp.einsum("bhm,bhd->bhmd", k_prime, v)
  z = z + k_prime
  out = _divide(jnp.einsum("bhm,bhmd->bhd", q_prime, s), jnp.einsum("bhm,bhm->bh", q_prime, z))
  return (s, z, c), out


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
  size = featurize(_heads_first(k[:, :1]))
  m = (size.value if size.value is not None else size.log).shape[-1]
  c0 = None if size.log is None else jnp.full((batch, heads, size.log.shape[-1]), _NO_KEY,
                                              jnp.float32)
  s0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  z0 = jnp.zeros((batch, heads, m), jnp.float32)
  xs = (_blocks(q, chunk), _blocks(k, chunk), _blocks(v, chunk),
        _blocks(mask[:, :, None, None], chunk)[..., 0, 0][:, :, None])
  step = jax.checkpoint(functools.partial(_causal_chunk, featurize))
  _, out = jax.lax.scan(step, (s0, z0, c0), xs)
  return _unblock(out, length)


def _causal_chunk(featurize, carry, xs):
  """One chunk: intra-chunk quadratic part plus the carried prefix state.

  Queries from the first key that outgrows the chunk's reference by more
  than `_HEADROOM` on are recomputed token by token (`_token_update`).
  """
  s, z, c = carry  # K'^T V [B, H, M, dv], K'^T 1 [B, H, M], [B, H, M or 1] or None
  q_blk, k_blk, v, keep = xs  # [B, C, H, d], [B, C, H, d], [B, C, H, dv], [B, 1, C]
  qf, kf, v = featurize(_heads_first(q_blk)), featurize(_heads_first(k_blk)), _heads_first(v)
  chunk = v.shape[2]
  keep = keep[..., None]
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))
  if kf.log is None:  # bounded features: no references needed
    k_prime = jnp.where(keep, kf.value, 0.0)  # [B, H, C, M]
    scores = jnp.where(causal, jnp.einsum("bhtm,bhjm->bhtj", qf.value, k_prime), 0.0)
    num = jnp.einsum("bhtj,bhjd->bhtd", scores, v) + jnp.einsum("bhtm,bhmd->bhtd", qf.value, s)
    den = jnp.sum(scores, axis=-1) + jnp.einsum("bhtm,bhm->bht", qf.value, z)
    s = s + jnp.einsum("bhjm,bhjd->bhmd", k_prime, v)
    return (s, z + jnp.sum(k_prime, axis=2), c), _heads_first(_divide(num, den))

  sg = jax.lax.stop_gradient
  k_log = jnp.where(keep, kf.log, -jnp.inf)
  c_t = sg(_prefix_max(k_log, c[:, :, None]))  # c_f(t): [B, H, C, M or 1], causal
  n_t = sg(jnp.max(qf.log + c_t, axis=-1, keepdims=True))  # N_t: [B, H, C, 1]
  ref = c_t[:, :, :1]  # the chunk's reference: c_f at its first position, <= t for every t
  rel = k_log - ref  # each key's growth over the reference
  # Query t is computed in one product while no key j <= t of the chunk has
  # grown past the headroom; from the first one that has, token by token.
  fast = jnp.cumsum(sg(jnp.max(rel, axis=-1)) > _HEADROOM, axis=-1) == 0  # [B, H, C]
  q_prime = _times(qf.value, jnp.exp(qf.log + ref - n_t))  # <= 1
  # Clipped keys are seen only by queries that take the exact path.
  k_prime = _times(kf.value, jnp.exp(jnp.minimum(rel, _HEADROOM)))  # <= e^60
  to_ref = jnp.exp(c - ref[:, :, 0])  # [B, H, M or 1], <= 1: the state against the reference
  scores = jnp.where(causal, jnp.einsum("bhtm,bhjm->bhtj", q_prime, k_prime), 0.0)
  num = (jnp.einsum("bhtj,bhjd->bhtd", scores, v)  # [B, H, C, dv]
         + jnp.einsum("bhtm,bhmd->bhtd", q_prime, s * to_ref[..., None]))
  den = jnp.sum(scores, axis=-1) + jnp.einsum("bhtm,bhm->bht", q_prime, z * to_ref)
  out = _divide(num, den)

  exact = _rows_if_needed(jnp.logical_not(jnp.all(fast)), (s, z, c), qf, kf._replace(log=k_log),
                          v)
  out = jnp.where(fast[..., None], out, exact)

  # The state moves to the chunk's last reference: every stored term <= 1, at any growth.
  c_end = c_t[:, :, -1]  # [B, H, M or 1]
  k_state = _times(kf.value, jnp.exp(k_log - c_end[:, :, None]))
  decay = jnp.exp(c - c_end)
  s = s * decay[..., None] + jnp.einsum("bhjm,bhjd->bhmd", k_state, v)
  z = z * decay + jnp.sum(k_state, axis=2)
  return (s, z, c_end), _heads_first(out)


def _rows_by_token(state, qf, kf, v):
  """A chunk's outputs by `_token_update`, key by key: exact at any growth.

  state: (S, z, c) before the chunk; qf, kf: `Features` of [B, H, C, M];
  v: [B, H, C, dv]. Returns [B, H, C, dv]. The keys are read in groups of
  about sqrt(C), each recomputed in the backward pass, so that at most
  about 2 sqrt(C) states [B, H, M, dv] are stored, not C.
  """
  chunk = v.shape[2]
  group = max(g for g in range(1, math.isqrt(chunk) + 1) if chunk % g == 0)
  def per_token(x):  # [B, H, C, ...] -> [C / group, group, B, H, ...]
    x = jnp.moveaxis(x, 2, 0)
    return x.reshape((chunk // group, group) + x.shape[1:])

  @jax.checkpoint
  def one_group(state, xs):
    return jax.lax.scan(lambda st, x: _token_update(st, *x), state, xs)

  _, out = jax.lax.scan(one_group, state, jax.tree.map(per_token, (qf, kf, v)))
  return jnp.moveaxis(out.reshape((chunk,) + out.shape[2:]), 0, 2)


@jax.custom_vjp
def _rows_if_needed(needed, state, qf, kf, v):
  """`_rows_by_token` if `needed` (a traced bool), else zeros, in both passes.

  Its own VJP, because autodiff of a `lax.cond` fills the branch not taken
  with zero residuals in every chunk: measured 1.2x slower on CPU even when
  no chunk needed the exact path.
  """
  return jax.lax.cond(needed, _rows_by_token, lambda *args: jnp.zeros_like(args[-1]),
                      state, qf, kf, v)


def _rows_if_needed_fwd(needed, state, qf, kf, v):
  return _rows_if_needed(needed, state, qf, kf, v), (needed, state, qf, kf, v)


def _rows_if_needed_bwd(residuals, g):
  needed, *args = residuals
  grads = jax.lax.cond(needed, lambda: jax.vjp(_rows_by_token, *args)[1](g),
                       lambda: jax.tree.map(jnp.zeros_like, tuple(args)))
  return (None, *grads)


_rows_if_needed.defvjp(_rows_if_needed_fwd, _rows_if_needed_bwd)


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


EXPONENTIAL_KERNELS = ("positive", "hyperbolic", "trig", "exp")  # kernels with logs, and a limit


def _featurize(x, *, W, kernel, scale, kernel_epsilon):
  """Split-form features of x * scale, float32; logs NaN where |x * scale| > MAX_NORM."""
  x = x.astype(jnp.float32) * scale
  parts = features.feature_parts(x, W, kernel, kernel_epsilon=kernel_epsilon)
  if parts.log is None:
    return parts
  beyond = jnp.sum(x * x, axis=-1, keepdims=True) > MAX_NORM ** 2
  return parts._replace(log=jnp.where(beyond, jnp.nan, parts.log))


def _features(q, k, W, kernel, scale, kernel_epsilon):
  """`_featurize` of q and k (default scale d^(-1/4))."""
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  return tuple(_featurize(x, W=W, kernel=kernel, scale=scale, kernel_epsilon=kernel_epsilon)
               for x in (q, k))


def _check_norms(q, k, mask, scale):
  """ValueError naming the largest scaled norm of q or of a real key past MAX_NORM."""
  for name, x, keep in (("query", q, None), ("key", k, mask)):
    norms = jnp.linalg.norm(x.astype(jnp.float32), axis=-1) * abs(scale)  # [B, L, H]
    if keep is not None:
      norms = jnp.where(keep[:, :, None], norms, 0.0)
    largest = float(jnp.max(norms)) if norms.size else 0.0
    if not largest <= MAX_NORM:  # NaN inputs fail here too
      raise ValueError(f"a {name} has scaled norm |x| d^(-1/4) = {largest:.4g}, past "
                       f"favor.MAX_NORM = {MAX_NORM:g}, where float32 cannot resolve FAVOR's "
                       f"feature logs (~|x|^2/2 nats); normalise or rescale q and k")


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
