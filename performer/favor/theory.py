"""Closed-form mean squared errors of softmax-kernel estimators (Lemma 2, Theorem 2)."""

import numpy as np


def softmax_kernel_mse(x, y, m, kernel):
  """Lemma 2: MSE of the m-feature estimator of exp(x.y) with iid features.

  Args:
    x, y: [..., d] float arrays (float64 advised: the values span decades).
    m: number of random projections w_i.
    kernel: `positive`, `hyperbolic` or `trig`.

  Returns:
    [...] float64 mean squared errors.

  Raises:
    ValueError: unknown kernel.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  sm = np.exp(np.sum(x * y, -1))
  s_plus = np.sum((x + y) ** 2, -1)
  s_minus = np.sum((x - y) ** 2, -1)
  pos = np.exp(s_plus) * sm ** 2 * (1 - np.exp(-s_plus)) / m
  if kernel == "positive":
    return pos
  if kernel == "hyperbolic":
    return 0.5 * (1 - np.exp(-s_plus)) * pos
  if kernel == "trig":
    return np.exp(s_plus) / sm ** 2 * (1 - np.exp(-s_minus)) ** 2 / (2 * m)
  raise ValueError(f"Lemma 2 covers positive, hyperbolic and trig, not {kernel!r}")


def orthogonal_gain_bound(x, y, m, d):
  """Theorem 2: lower bound on MSE(iid) - MSE(orthogonal), `positive`, m <= d.

  Args:
    x, y: [..., d] float arrays; m: number of features; d: dimension.

  Returns:
    [...] float64 (1 - 1/m) 2/(d+2) (SM(x,y) - exp(-(|x|^2+|y|^2)/2))^2.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  sm = np.exp(np.sum(x * y, -1))
  floor = np.exp(-0.5 * (np.sum(x * x, -1) + np.sum(y * y, -1)))
  return (1 - 1 / m) * 2 / (d + 2) * (sm - floor) ** 2


def exponential_variance(x, y, A, transform_x=None, transform_y=None):
  """Variance of one feature of the GERF/DERF family (favor/exponential.py) for exp(x.y).

  One feature f(w, x) f(w, y), w ~ N(0, I_d), with z_x = x T_x, z_y = y T_y
  (T_x T_y^T = I, so z_x.z_y = x.y) and A_l per coordinate of z:
    Var = SM(x, y)^2 [prod_l (1 + 16 A_l^2 / (1 - 8 A_l))^(1/2)
                      exp((z_x + z_y)_l^2 / (1 - 8 A_l)) - 1],
  which for one A and T = I is GERF's
    SM(x, y)^2 [(1 + 16 A^2 / (1 - 8A))^(d/2) exp(|x + y|^2 / (1 - 8A)) - 1]
  (A = 0: FAVOR+, m times Lemma 2's MSE(pos)). m iid features divide it by m.

  Args:
    x, y: [..., d] float arrays.
    A: a scalar or [..., d], every value < 1/8.
    transform_x, transform_y: [..., d, d] (None: the identity).

  Returns:
    [...] float64 variances.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  zx = x if transform_x is None else np.einsum("...d,...de->...e", x, transform_x)
  zy = y if transform_y is None else np.einsum("...d,...de->...e", y, transform_y)
  zx, zy, A = np.broadcast_arrays(zx, zy, np.asarray(A, np.float64))
  log_ratio = np.sum(0.5 * np.log1p(16 * A ** 2 / (1 - 8 * A)) + (zx + zy) ** 2 / (1 - 8 * A), -1)
  return np.exp(2 * np.sum(x * y, -1)) * np.expm1(log_ratio)
