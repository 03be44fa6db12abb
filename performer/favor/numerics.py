"""Split-form numerics shared by FAVOR's passes: norm-limited features and safe division by D.

The passes subtract per-feature maxima from the logs so nothing overflows (docs/ARCHITECTURE.md)."""

import jax
import jax.numpy as jnp

from performer.favor import features

# Largest scaled query/key norm |q| d^(-1/4) served: the logs are about |x|^2 / 2,
# and float32 resolves them to ~|x|^2 6e-8 nats (tests/favor/test_attention.py checks the
# passes against a float64 evaluation over the served norms).
MAX_NORM = 100.0
# A per-feature reference below any real log: no key seen yet (finite, so
# that differences of two such references are 0, not NaN).
NO_KEY = -1e30


def featurize(x, *, W, kernel, scale, kernel_epsilon, params=None):
  """Split-form features of x * scale, float32; logs NaN where |x * scale| > MAX_NORM.

  x: [..., n, d]; params: one side's `exponential.Side` for the
  data-dependent kernels (leading dims broadcasting against x's), else None.
  """
  x = x.astype(jnp.float32) * scale
  parts = features.feature_parts(x, W, kernel, kernel_epsilon=kernel_epsilon, params=params)
  if parts.log is None:
    return parts
  beyond = jnp.sum(x * x, axis=-1, keepdims=True) > MAX_NORM ** 2
  return parts._replace(log=jnp.where(beyond, jnp.nan, parts.log))


def check_norms(q, k, mask, scale):
  """ValueError if q or a real key holds NaN or Inf, else naming the largest scaled norm past
  MAX_NORM."""
  for arg, name, x, keep in (("q", "query", q, None), ("k", "key", k, mask)):
    finite = jnp.all(jnp.isfinite(x), axis=-1)  # [B, L, H]; not |x|, which may overflow to Inf
    if keep is not None:
      finite = finite | ~keep[:, :, None]  # padded keys are never read
    if not bool(jnp.all(finite)):
      where = "" if keep is None else " (in a key the mask keeps)"
      raise ValueError(f"{arg} contains NaN or Inf{where}")
    norms = jnp.linalg.norm(x.astype(jnp.float32), axis=-1) * jnp.abs(scale)  # [B, L, H]
    if keep is not None:
      norms = jnp.where(keep[:, :, None], norms, 0.0)
    largest = float(jnp.max(norms)) if norms.size else 0.0
    if not largest <= MAX_NORM:  # a NaN scale fails here too
      raise ValueError(f"a {name} has scaled norm |x| d^(-1/4) = {largest:.4g}, past "
                       f"favor.MAX_NORM = {MAX_NORM:g}, where float32 cannot resolve FAVOR's "
                       f"feature logs (~|x|^2/2 nats); normalise or rescale q and k")


def check_renormalize(kernel, renormalize):
  """Raises ValueError for renormalize=False with an exponential kernel: its features are
  stabilised by constants that only D^-1 cancels (App. D.3 switches it off for generalized
  kernels alone)."""
  from performer.favor import kernels  # pylint: disable=import-outside-toplevel
  if not renormalize and kernel in kernels.EXPONENTIAL_KERNELS:
    bounded = [k for k in kernels.GENERALIZED_KERNELS if k not in kernels.EXPONENTIAL_KERNELS]
    raise ValueError(f"renormalize=False needs a generalized kernel without exponential "
                     f"features ({', '.join(bounded)}); {kernel!r} is exponential, whose "
                     "stabilising constants only the normaliser D cancels")


def normalise(num, den, renormalize=True):
  """D^-1 num (`divide`), or num alone when renormalize is False (App. D.3: generalized
  attention without its normaliser)."""
  return divide(num, den) if renormalize else num


def divide(num, den):
  """num / D; a query with D = 0 (no weight on any key) gets 0, not NaN.

  Zero-padded chunk rows have all-zero features: a NaN there, though sliced
  off, would poison the backward pass.
  """
  zero = den == 0.0
  return jnp.where(zero[..., None], 0.0, num / jnp.where(zero, 1.0, den)[..., None])


def times(value, scale):
  """value * scale, with value None read as 1."""
  return scale if value is None else value * scale


def query_prime(qf, c):
  """Query features against key reference c, normalised by each query's largest term (<= 1).

  qf: `features.Features` of [..., n, M]; c: [..., 1, M or 1] (or
  broadcastable). The query's own factor exp(N) cancels in D.
  """
  q_log = qf.log + c
  return times(qf.value, jnp.exp(q_log - jax.lax.stop_gradient(
      jnp.max(q_log, axis=-1, keepdims=True))))


def empty_state(featurize_k, d, dv, *lead):
  """The state of a pass over keys before any key, float32: S = K'^T V [*lead, M, dv],
  z = K'^T 1 [*lead, M] and the reference c [*lead, M or 1] their terms are kept against
  (causal.py, bidirectional.py; lead: (B, H), or none in fused.py's kernel). featurize_k
  maps keys of d coordinates to M features. Bounded features need no reference: c = 0."""
  size = jax.eval_shape(featurize_k, jax.ShapeDtypeStruct((1, d), jnp.float32))
  m = (size.value if size.value is not None else size.log).shape[-1]
  refs = 1 if size.log is None else size.log.shape[-1]
  no_key = 0.0 if size.log is None else NO_KEY
  return (jnp.zeros(lead + (m, dv), jnp.float32), jnp.zeros(lead + (m,), jnp.float32),
          jnp.full(lead + (refs,), no_key, jnp.float32))
