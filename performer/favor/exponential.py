"""FAVOR++ and FAVOR#: positive random features for SM(x, y) = exp(x.y) fitted to the data.

x is a query and y a key, both already scaled by d^(-1/4); w ~ N(0, I_d).

GERF, generalized exponential random features (FAVOR++; Likhosherstov et
al., NeurIPS 2022, arXiv 2205.15317):
  f(w, x) = D exp(A |w|^2 + B w.x + C |x|^2),
  B = sqrt(1 - 4A), C = -1/2, D = (1 - 4A)^(d/4), A < 1/8.
E[f(w, x) f(w, y)] = exp(x.y) for every such A, as E exp(2A|w|^2 + b.w) =
(1 - 4A)^(-d/2) exp(|b|^2 / (2 (1 - 4A))); A = 0 is FAVOR+. One feature's
variance is SM(x, y)^2 [(1 + 16 A^2 / (1 - 8A))^(d/2) exp(|x + y|^2 / (1 - 8A)) - 1]
(theory.exponential_variance), least at
  A*(rho) = (1 - 2 rho - sqrt((2 rho + 1)^2 + 8 rho)) / 16,  rho = |x + y|^2 / d,
where the derivative of its log vanishes. Attention has one A per head and
sequence, so rho is |x_i + y_j|^2 / d averaged over all pairs:
(mean |x|^2 + mean |y|^2 + 2 mean(x).mean(y)) / d.

DERF, dense exponential random features, and its simplified asymmetric form
SADERF (FAVOR#; Likhosherstov et al., ICML 2023, arXiv 2302.00787). Rotating
x and y by the same orthogonal Q, or scaling them by Psi and Psi^-1, keeps
x.y, so GERF applied coordinate by coordinate to z = x T with its own A_l
per coordinate stays unbiased:
  phi(x) = prod_l (1 - 4 A_l)^(1/4) exp(sum_l (A_l w_l^2 + sqrt(1 - 4 A_l) w_l z_l) - |z|^2 / 2),
the form features.py computes (divided by sqrt(m) for m features). Its
variance is the GERF one taken per coordinate of z_x + z_y.
* derf (the paper's SDERF): T = Q from P = mean(x x^T) + mean(y y^T) +
  mean(x) mean(y)^T + mean(y) mean(x)^T = Q diag(s) Q^T, the average of
  (x_i + y_j)(x_i + y_j)^T over pairs, and A_l = A*(s_l).
* saderf: T = Psi for queries and Psi^-1 for keys, Psi = diag(psi) with
  psi_l = (mean y_l^2 / mean x_l^2)^(1/4), which minimises the pair average
  of |Psi x + Psi^-1 y|^2; then GERF's A* with that average. (The direction
  of Psi is derived here; tests/favor/test_exponential.py checks that it,
  not its inverse, lowers the variance.)

Parameters never carry gradients (they are chosen, not learned) and are
built from statistics (`Moments`) that the caller picks: bidirectional
attention takes them from the real tokens of the sequence; causal attention
must take them from tokens outside it (running averages; see
attention/performer.py), or an output would depend on later tokens.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from performer.favor.features import DATA_DEPENDENT_KERNELS

PSI_RANGE = (0.1, 10.0)  # psi is clipped: any Psi stays unbiased, and float32 logs stay sane
_TINY = 1e-12  # floor of a second moment (a coordinate that is always 0)


class Moments(NamedTuple):
  """First and second moments of queries or keys over tokens (float32).

  mean: [..., d], E[x]; second: [..., d, d], E[x x^T].
  """
  mean: jax.Array
  second: jax.Array


class Side(NamedTuple):
  """One side's (queries' or keys') parameters: z = x @ transform, then A per coordinate.

  transform: [..., d, d]; A: [..., d], each < 1/8 (float32).
  """
  transform: jax.Array
  A: jax.Array


def moments(x, mask=None):
  """Moments of x over its tokens, per batch element and head.

  Args:
    x: [B, L, H, d] scaled queries or keys, any float dtype.
    mask: [B, L] bool, True = a real token, or None (all real). A sequence
      with no real token gets zero moments.

  Returns:
    `Moments` of [B, H, d] and [B, H, d, d], float32, without gradients.
  """
  x = jax.lax.stop_gradient(x.astype(jnp.float32))
  keep = (jnp.ones(x.shape[:2], jnp.float32) if mask is None
          else mask.astype(jnp.float32))[:, :, None, None]  # [B, L, 1, 1]
  count = jnp.maximum(jnp.sum(keep, axis=1), 1.0)  # [B, 1, 1]
  mean = jnp.sum(x * keep, axis=1) / count  # [B, H, d]
  second = jnp.einsum("blhd,blhe->bhde", x * keep, x) / count[..., None]
  return Moments(mean, second)


def identity(d):
  """The Side of FAVOR+ itself (A = 0, T = I): what zero moments give."""
  return Side(jnp.eye(d, dtype=jnp.float32), jnp.zeros((d,), jnp.float32))


def optimal_a(rho):
  """GERF's variance-minimising A*(rho) <= 0 for rho = |x + y|^2 / d >= 0 (any shape)."""
  rho = jnp.maximum(rho, 0.0)
  return (1.0 - 2.0 * rho - jnp.sqrt(jnp.square(2.0 * rho + 1.0) + 8.0 * rho)) / 16.0


def parameters(kernel, queries, keys):
  """The (query Side, key Side) of a data-dependent kernel from the moments of both.

  Args:
    kernel: `gerf`, `derf` or `saderf`.
    queries, keys: `Moments` with the same leading dims ([..., d] means).

  Returns:
    (Side, Side), float32, leading dims those of the moments.

  Raises:
    ValueError: an unknown kernel.
  """
  if kernel not in DATA_DEPENDENT_KERNELS:
    raise ValueError(f"data-dependent kernels are {DATA_DEPENDENT_KERNELS}, not {kernel!r}")
  qm, km = jax.tree.map(lambda a: jax.lax.stop_gradient(a.astype(jnp.float32)), (queries, keys))
  d = qm.mean.shape[-1]
  eye = jnp.broadcast_to(jnp.eye(d, dtype=jnp.float32), qm.second.shape)
  cross = jnp.sum(qm.mean * km.mean, axis=-1, keepdims=True)  # [..., 1]
  q_sq, k_sq = (jnp.diagonal(m.second, axis1=-2, axis2=-1) for m in (qm, km))  # [..., d]
  if kernel == "gerf":
    rho = (jnp.sum(q_sq + k_sq, -1, keepdims=True) + 2.0 * cross) / d
    A = jnp.broadcast_to(optimal_a(rho), qm.mean.shape)
    return Side(eye, A), Side(eye, A)
  if kernel == "derf":
    outer = qm.mean[..., :, None] * km.mean[..., None, :]
    P = qm.second + km.second + outer + jnp.swapaxes(outer, -1, -2)
    s, Q = jnp.linalg.eigh(P)  # P = Q diag(s) Q^T; z = x Q has coordinates Q_l . x
    A = optimal_a(s)
    return Side(Q, A), Side(Q, A)
  psi = jnp.clip((jnp.maximum(k_sq, _TINY) / jnp.maximum(q_sq, _TINY)) ** 0.25, *PSI_RANGE)
  rho = (jnp.sum(psi ** 2 * q_sq + k_sq / psi ** 2, -1, keepdims=True) + 2.0 * cross) / d
  A = jnp.broadcast_to(optimal_a(rho), qm.mean.shape)
  return Side(eye * psi[..., None, :], A), Side(eye / psi[..., None, :], A)
