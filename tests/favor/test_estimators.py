"""Softmax-kernel estimators: unbiasedness, Lemma 2's MSE, Theorem 2's ordering."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import favor
from performer.favor import theory

D = 4


def _pair(scale):
  x = scale * np.array([0.5, -0.3, 0.2, 0.4])
  y = scale * np.array([0.1, 0.4, -0.5, 0.3])
  return x, y


def _estimates(x, y, m, kernel, kind, n=20000, seed=0):
  """n independent estimates phi(x).phi(y), each with its own W."""
  def one(key):
    W = favor.projection(key, m, D, kind)
    return favor.feature_map(jnp.asarray(x, jnp.float32), W, kernel) @ favor.feature_map(
        jnp.asarray(y, jnp.float32), W, kernel)
  return np.asarray(jax.vmap(one)(jax.random.split(jax.random.key(seed), n)), np.float64)


@pytest.mark.parametrize("kernel", favor.SOFTMAX_KERNELS)
@pytest.mark.parametrize("kind", ["iid", "orthogonal"])
def test_unbiased(kernel, kind):
  x, y = _pair(1.0)
  est = _estimates(x, y, 8, kernel, kind)
  se = est.std() / np.sqrt(len(est))
  assert abs(est.mean() - np.exp(x @ y)) < 4 * se


@pytest.mark.parametrize("kernel", favor.SOFTMAX_KERNELS)
@pytest.mark.parametrize("scale", [0.7, 1.5])
def test_iid_mse_matches_lemma2(kernel, scale):
  x, y = _pair(scale)
  m = 8
  sq_err = (_estimates(x, y, m, kernel, "iid", n=40000) - np.exp(x @ y)) ** 2
  se = sq_err.std() / np.sqrt(len(sq_err))
  expected = theory.softmax_kernel_mse(x, y, m, kernel)
  assert abs(sq_err.mean() - expected) < 4 * se + 1e-6 * expected
  assert se < 0.1 * expected  # the comparison is sharp enough to catch a wrong formula


def test_lemma2_orderings_depend_on_the_regime():
  small = np.array([1.2, 0.0, 0.0, 0.0]), np.array([-1.2, 0.36, 0.0, 0.0])  # SM ~ 0.24
  mse = {k: theory.softmax_kernel_mse(*small, 8, k) for k in favor.SOFTMAX_KERNELS}
  assert mse["positive"] < 0.01 * mse["trig"]  # small kernel values: positive wins
  assert mse["hyperbolic"] < mse["positive"]  # factor (1 - exp(-|x+y|^2)) / 2
  aligned = np.array([0.3, 0.2, 0.0, 0.1]), np.array([0.3, 0.2, 0.0, 0.1])
  assert theory.softmax_kernel_mse(*aligned, 8, "trig") == 0.0  # x = y: trig exact
  assert theory.softmax_kernel_mse(*aligned, 8, "positive") > 0.0


def test_orthogonal_beats_iid_by_theorem2_gap():
  x, y = _pair(1.0)
  m = D  # Theorem 2 holds for m <= d
  truth = np.exp(x @ y)
  ort = (_estimates(x, y, m, "positive", "orthogonal", n=160000) - truth) ** 2
  iid = (_estimates(x, y, m, "positive", "iid", n=160000, seed=1) - truth) ** 2
  se = ort.std() / np.sqrt(len(ort))
  iid_mse = theory.softmax_kernel_mse(x, y, m, "positive")
  gap = theory.orthogonal_gain_bound(x, y, m, D)
  assert ort.mean() < iid.mean()
  assert ort.mean() < iid_mse - gap + 4 * se
  assert iid_mse > iid_mse - gap + 4 * se  # an iid estimator would fail the line above


def test_generalized_features():
  x = jnp.array([[0.5, -1.0, 2.0]])
  np.testing.assert_allclose(favor.feature_map(x, None, "relu"), [[0.5, 0.0, 2.0]])
  np.testing.assert_allclose(favor.feature_map(x, None, "relu", kernel_epsilon=1e-3),
                             [[0.501, 0.001, 2.001]], rtol=1e-6)
  np.testing.assert_allclose(favor.feature_map(x, None, "elu_plus_one"),
                             [[1.5, np.exp(-1.0), 3.0]], rtol=1e-6)
  W = jnp.eye(3)[:2] * 2.0
  np.testing.assert_allclose(favor.feature_map(x, W, "exp"), np.exp([[1.0, -2.0]]) / np.sqrt(2), rtol=1e-6)
  with pytest.raises(ValueError, match="needs a projection"):
    favor.feature_map(x, None, "positive")
  with pytest.raises(ValueError, match="unknown kernel"):
    favor.feature_map(x, W, "gaussian")
  with pytest.raises(ValueError, match="W must be"):
    favor.feature_map(x, jnp.eye(4), "positive")
