"""References: exact softmax attention, Eq. (1)-(2), and FAVOR's attention matrix made explicit.

They form L x L matrices: oracles for tests and attention maps, not a fast path."""

import jax
import jax.numpy as jnp

from performer.favor import blocks, numerics


def softmax_matrix(q, k, *, causal=False, mask=None):
  """Exact softmax attention weights softmax(q k^T / sqrt(d)), Eq. (1)-(2).

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; any float dtype (computed in float32).
    causal: query i sees keys j <= i (needs Lq == Lk).
    mask: [B, Lk] bool key mask (True = real token) or None.

  Returns:
    [B, H, Lq, Lk] float32, rows summing to 1. A query with no visible key
    weighs all keys equally.

  Raises:
    ValueError: a mask not bool.
  """
  blocks.check_mask(mask)
  d = q.shape[-1]
  logits = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32),
                      k.astype(jnp.float32)) / jnp.sqrt(jnp.float32(d))
  allowed = _allowed(q.shape[1], k.shape[1], causal)
  if mask is not None:
    allowed = allowed & mask[:, None, None, :]
  return jax.nn.softmax(jnp.where(allowed, logits, jnp.finfo(jnp.float32).min), axis=-1)


def softmax_attention(q, k, v, *, causal=False, mask=None):
  """Exact softmax attention, Eq. (1) and (2): the reference.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; v: [B, Lk, H, dv]; any float dtype;
      Lq, Lk, d >= 1.
    causal: query i attends to keys j <= i (needs Lq == Lk).
    mask: [B, Lk] bool key padding mask, True = real token, or None.

  Returns:
    [B, Lq, H, dv] in v's dtype; computed in float32 with logits
    q.k / sqrt(d). A query with no visible key gets the mean of all values.

  Raises:
    ValueError: inconsistent shapes, Lq, Lk or d = 0, q, k or v not of a
      floating dtype, or a mask not bool.
  """
  blocks.check_inputs(q, k, v, mask, causal)
  probs = softmax_matrix(q, k, causal=causal, mask=mask)  # [B, H, Lq, Lk]
  return jnp.einsum("bhqk,bkhd->bqhd", probs, v.astype(jnp.float32)).astype(v.dtype)


def attention_matrix(q, k, W, *, kernel="positive", kernel_epsilon=0.0, mask=None, causal=False,
                     scale=None, params=None):
  """The attention matrix implicit in FAVOR, Eq. (4): rows of Q' K'^T divided by D.

  Built as favor_attention builds its estimator: features of q d^(-1/4) and
  k d^(-1/4), each key's logs less a per-feature reference c_f (the maximum
  over real keys; for causal attention over keys <= i, row by row), each
  query's logs plus c_f less their maximum. Both shifts cancel in A, so A is
  the unstabilized estimator's, computed without overflow.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; any float dtype.
    W: [m, d] projection (a Performer layer's `attn.W[...]`), or None for a
      generalized kernel without one.
    kernel, kernel_epsilon, scale: as in `favor_attention`.
    mask: [B, Lk] bool key mask or None; masked keys get weight 0.
    causal: unidirectional (needs Lq == Lk); query i sees keys j <= i.
    params: (query, key) `exponential.Side`s of a data-dependent kernel,
      leading dims [B, H] (or broadcasting to them), else None.

  Returns:
    [B, H, Lq, Lk] float32 with A @ v equal to favor_attention(q, k, v, W,
    ...) up to rounding. Rows sum to 1, except a row whose D is exactly 0
    (e.g. all-zero ReLU features), which is 0, as the backend's output is.
    Kernels with signed features (trig, identity, ...) may give negative weights.

  Raises:
    ValueError: unknown kernel, bad W or params (from `features.feature_parts`),
      causal with Lq != Lk, or a mask not bool.
  """
  blocks.check_mask(mask)
  if causal and q.shape[1] != k.shape[1]:
    raise ValueError(f"causal attention needs Lq == Lk, got {q.shape[1]} and {k.shape[1]}")
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  q_params, k_params = (None, None) if params is None else params
  qf, kf = (numerics.featurize(blocks.heads_first(x), W=W, kernel=kernel, scale=scale,
                               kernel_epsilon=kernel_epsilon, params=p)
            for x, p in ((q, q_params), (k, k_params)))  # [B, H, L, M]
  keep = (jnp.ones(k.shape[:2], bool) if mask is None else mask)[:, None, :, None]  # [B, 1, Lk, 1]
  if kf.log is None:  # bounded generalized features: no stabilization needed
    scores = jnp.einsum("bhim,bhjm->bhij", qf.value, jnp.where(keep, kf.value, 0.0))
  else:
    k_log = jnp.where(keep, kf.log, -jnp.inf)  # [B, H, Lk, M or 1]
    if causal:
      scores = _causal_scores(qf, kf.value, k_log)
    else:
      c = jnp.maximum(jnp.max(k_log, axis=2, keepdims=True), numerics.NO_KEY)  # [B, H, 1, M or 1]
      scores = jnp.einsum("bhim,bhjm->bhij", numerics.query_prime(qf, c),
                          numerics.times(kf.value, jnp.exp(k_log - c)))
  scores = jnp.where(_allowed(q.shape[1], k.shape[1], causal), scores, 0.0)  # [B, H, Lq, Lk]
  den = jnp.sum(scores, axis=-1, keepdims=True)
  return jnp.where(den == 0.0, 0.0, scores / jnp.where(den == 0.0, 1.0, den))


def _causal_scores(qf, k_value, k_log):
  """q'_i . k'_j for j <= i against row i's own reference (keys <= i): [B, H, L, L].

  One row at a time (lax.map), so only [B, H, L, M] exists at once.
  """
  length = k_log.shape[2]
  c_all = jnp.maximum(jax.lax.cummax(k_log, axis=2), numerics.NO_KEY)  # [B, H, L, M or 1]

  def row(xs):
    i, c, q_log, q_value = xs  # [], [B, H, M or 1], [B, H, M or 1], [B, H, M] or None
    c = c[:, :, None]  # [B, H, 1, M or 1]
    seen = (jnp.arange(length) <= i)[None, None, :, None]
    k_prime = numerics.times(k_value, jnp.exp(jnp.where(seen, k_log, -jnp.inf) - c))
    q_i = qf._replace(value=None if q_value is None else q_value[:, :, None],
                      log=q_log[:, :, None])
    return jnp.einsum("bhim,bhjm->bhij", numerics.query_prime(q_i, c), k_prime)[:, :, 0]

  rows = lambda x: None if x is None else jnp.moveaxis(x, 2, 0)  # [B, H, L, e] -> [L, B, H, e]
  xs = (jnp.arange(length), rows(c_all), rows(qf.log), rows(qf.value))
  return jnp.moveaxis(jax.lax.map(row, xs), 0, 2)


def _allowed(lq, lk, causal):
  ones = jnp.ones((lq, lk), bool)
  return jnp.tril(ones) if causal else ones


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
