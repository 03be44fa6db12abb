"""Random-feature maps phi with phi(x)^T phi(y) ~ K(x, y) (Sec. 2.2-2.3, Lemma 1).

Each map returns value * exp(log) so attention can subtract maxima before exponentiating."""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from performer.favor.kernels import (DATA_DEPENDENT_KERNELS, DETERMINISTIC_ONLY, KERNELS,
                                     SOFTMAX_KERNELS)

# f of the bounded generalized kernels, phi = f(W x) / sqrt(m) + kernel_epsilon.
_BOUNDED = {
    "relu": jax.nn.relu,
    "elu_plus_one": lambda u: jax.nn.elu(u) + 1.0,
    "identity": lambda u: u,
    "sigmoid": jax.nn.sigmoid,
    "abs": jnp.abs,
    "gelu": jax.nn.gelu,  # approximate=True, the tanh form (JAX's default)
    "tanh": jnp.tanh,
}


class Features(NamedTuple):
  """phi(x) = value * exp(log), elementwise, in float32.

  value: [..., M] or None (read as 1): the bounded part.
  log: [..., M], [..., 1] (one log-scale per token) or None (read as 0).
  M is the feature dimension: m, or 2m for `hyperbolic` and `trig`, or d for
  a generalized kernel used without W, or 1 + d + d^2 for `taylor`.
  """
  value: jax.Array | None
  log: jax.Array | None


def feature_parts(x, W, kernel="positive", *, kernel_epsilon=0.0, params=None):
  """phi(x) in split form (see `Features`); no scaling is applied to x.

  Args:
    x: [..., d] queries or keys, any float dtype (computed in float32); for
      a data-dependent kernel [..., n, d], n tokens sharing one set of
      parameters.
    W: [m, d] projection from `projection`, or None for a deterministic
      generalized kernel (phi(x) = f(x)); always None for `taylor`.
    kernel: one of `KERNELS`.
    kernel_epsilon: added to bounded generalized features (App. A.4 uses 1e-3
      for relu) so that no token's features are all zero; ignored by the
      softmax kernels and exp.

  Returns:
    `Features`, float32.

  Raises:
    ValueError: unknown kernel; W missing for a softmax kernel, or given for
      `taylor`; W not [m, d] or m = 0; params missing for a data-dependent
      kernel or given for another.
  """
  if kernel not in KERNELS:
    raise ValueError(f"unknown kernel {kernel!r}; choose from {KERNELS}")
  if (params is None) == (kernel in DATA_DEPENDENT_KERNELS):
    raise ValueError(f"kernel {kernel!r} " + ("needs parameters from favor.exponential"
                                              if params is None else "takes no parameters"))
  x = x.astype(jnp.float32)
  if kernel in DETERMINISTIC_ONLY:
    if W is not None:
      raise ValueError(f"kernel {kernel!r} is deterministic: it takes no projection W")
    outer = (x[..., :, None] * x[..., None, :]).reshape(*x.shape[:-1], -1) / math.sqrt(2)
    return Features(jnp.concatenate([jnp.ones_like(x[..., :1]), x, outer], axis=-1), None)
  if W is None:
    if kernel in SOFTMAX_KERNELS + DATA_DEPENDENT_KERNELS:
      raise ValueError(f"kernel {kernel!r} needs a projection matrix W")
    wx, log_norm = x, 0.0
  else:
    if W.ndim != 2 or W.shape[1] != x.shape[-1]:
      raise ValueError(f"W must be [m, d={x.shape[-1]}], got shape {W.shape}")
    if W.shape[0] < 1:  # as `projection` says; else log(m) fails
      raise ValueError(f"FAVOR needs m >= 1 random features, got W of shape {W.shape}")
    wx = jnp.einsum("...d,md->...m", x, W.astype(jnp.float32))  # [..., m]
    log_norm = -0.5 * math.log(W.shape[0])  # the 1/sqrt(m) of every map

  if params is not None:
    return _exponential(x, W, params, log_norm)
  half_sq_norm = 0.5 * jnp.sum(x * x, axis=-1, keepdims=True)  # [..., 1]
  if kernel == "positive":  # exp(w.x - |x|^2/2) / sqrt(m)
    return Features(None, wx - half_sq_norm + log_norm)
  if kernel == "hyperbolic":  # exp(+-w.x - |x|^2/2) / sqrt(2m)
    both = jnp.concatenate([wx, -wx], axis=-1)  # [..., 2m]
    return Features(None, both - half_sq_norm + log_norm - 0.5 * math.log(2))
  if kernel == "trig":  # exp(|x|^2/2) (sin w.x, cos w.x) / sqrt(m)
    return Features(jnp.concatenate([jnp.sin(wx), jnp.cos(wx)], axis=-1),
                    half_sq_norm + log_norm)
  if kernel == "exp":
    return Features(None, wx + log_norm)
  return Features(math.exp(log_norm) * _BOUNDED[kernel](wx) + kernel_epsilon, None)


def _exponential(x, W, params, log_norm):
  """The data-dependent kernels' features: x [..., n, d] -> logs [..., n, m].

  phi(x) = prod_l (1 - 4 A_l)^(1/4) exp(sum_l (A_l w_l^2 + sqrt(1 - 4 A_l) w_l z_l) - |z|^2 / 2)
  / sqrt(m) with z = x T (params: A, T from exponential.py); `positive` at A = 0, T = I.
  """
  z = x @ params.transform  # [..., n, d]
  A = params.A[..., None, :]  # [..., 1, d]
  wz = jnp.einsum("...d,md->...m", z * jnp.sqrt(1.0 - 4.0 * A), W.astype(jnp.float32))
  offset = (jnp.einsum("md,...d->...m", jnp.square(W.astype(jnp.float32)), A)  # sum_l A_l w_l^2
            + 0.25 * jnp.sum(jnp.log1p(-4.0 * A), axis=-1, keepdims=True))
  return Features(None, wz + offset - 0.5 * jnp.sum(z * z, axis=-1, keepdims=True) + log_norm)


def feature_map(x, W, kernel="positive", *, kernel_epsilon=0.0, params=None):
  """phi(x) as an explicit array: [..., d] -> [..., M] float32.

  Unstabilized: exp may overflow for inputs of large norm, so attention uses
  `feature_parts` instead. Meant for estimator studies (Lemma 2) and tests.
  Arguments and errors as in `feature_parts`.
  """
  value, log = feature_parts(x, W, kernel, kernel_epsilon=kernel_epsilon, params=params)
  out = jnp.ones((), jnp.float32) if value is None else value
  return out * jnp.exp(log) if log is not None else out
