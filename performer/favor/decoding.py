"""Causal FAVOR one token at a time (App. B.1's prefix sums): incremental decoding.

`token_update` is also the causal pass's exact path: it is exact at any growth of the key logs."""

import jax.numpy as jnp

from performer.favor import blocks, numerics


def causal_decode_init(batch, heads, num_features, dv):
  """The empty prefix state for `causal_decode_step`: (S, z, c), float32.

  S: [B, H, M, dv] sum of k'_j v_j^T; z: [B, H, M] sum of k'_j; c: [B, H, M]
  the per-feature maximum of the keys' logs so far, their reference
  (`numerics.NO_KEY`: no token yet). M is the feature dimension (2m for
  hyperbolic and trig, d for generalized kernels without W).
  """
  return (jnp.zeros((batch, heads, num_features, dv), jnp.float32),
          jnp.zeros((batch, heads, num_features), jnp.float32),
          jnp.full((batch, heads, num_features), numerics.NO_KEY, jnp.float32))


def causal_decode_step(state, q, k, v, W, *, kernel="positive", scale=None, kernel_epsilon=0.0,
                       params=None, renormalize=True):
  """One token of causal FAVOR attention in O(M dv) work: App. B.1's prefix sums.

  Args:
    state: (S, z, c) from `causal_decode_init` or the previous step.
    q, k, v: [B, H, d] (v: [B, H, dv]) of the new token; W, kernel, scale,
      kernel_epsilon, params and renormalize as in `favor_attention` (params:
      the same (query, key) `exponential.Side`s for every step of a sequence).

  Returns:
    (new state, out [B, H, dv] in v's dtype): out equals row t of
    favor_attention(..., causal=True) for the sequence decoded so far. A
    token whose scaled norm exceeds `numerics.MAX_NORM` makes its output and
    every later one NaN.

  Raises:
    ValueError: q, k or v not of a floating dtype; bad W, kernel or params
      (see `features.feature_parts`); renormalize False with an exponential kernel.
  """
  blocks.check_float(q=q, k=k, v=v)
  numerics.check_renormalize(kernel, renormalize)
  scale = q.shape[-1] ** -0.25 if scale is None else scale
  q_params, k_params = (None, None) if params is None else params
  qf, kf = (numerics.featurize(x[:, :, None], W=W, kernel=kernel, scale=scale,
                               kernel_epsilon=kernel_epsilon, params=p)
            for x, p in ((q, q_params), (k, k_params)))  # [B, H, 1, M]
  squeeze = lambda f: f._replace(**{n: None if a is None else a[:, :, 0]
                                    for n, a in f._asdict().items()})
  state, out = token_update(state, squeeze(qf), squeeze(kf), v.astype(jnp.float32),
                            renormalize)
  return state, out.astype(v.dtype)


def token_update(state, qf, kf, v, renormalize=True):
  """Adds one key to the prefix state and reads one query against it: exact at any norm.

  qf, kf: `Features` of [..., M] (logs [..., M], [..., 1] or None); v:
  [..., dv] float32; state (S, z, c) as `causal_decode_init` gives it, with
  the same leading dims. The reference c grows to the per-feature maximum
  of the keys so far, so every stored term is <= 1 and the query is
  normalised by its largest term: the largest product q'.k' is exactly 1.
  """
  s, z, c = state
  if kf.log is None:
    q_prime, k_prime = qf.value, kf.value
  else:
    c_new = jnp.maximum(c, kf.log)  # a masked key has log -inf: c stays
    decay = jnp.exp(c - c_new)
    s, z = s * decay[..., None], z * decay
    q_prime = numerics.query_prime(qf, c_new)
    k_prime = numerics.times(kf.value, jnp.exp(kf.log - c_new))
    c = c_new
  # Elementwise products and sums, not einsums: fused.py's kernel runs this on [M] rows,
  # where Triton has no matrix-vector product.
  s = s + k_prime[..., :, None] * v[..., None, :]
  z = z + k_prime
  out = numerics.normalise(jnp.sum(q_prime[..., :, None] * s, axis=-2),
                           jnp.sum(q_prime * z, axis=-1), renormalize)
  return (s, z, c), out
