"""FAVOR++ and FAVOR#: positive random features for SM(x, y) = exp(x.y) fitted to the data.

Parameters come from query/key statistics, never learned; causal use needs outside statistics."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from performer.favor import blocks
from performer.favor.kernels import DATA_DEPENDENT_KERNELS

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

  Raises:
    ValueError: a mask not bool.
  """
  blocks.check_mask(mask)
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
