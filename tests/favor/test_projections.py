"""Projection matrices: shapes, exact orthogonality, row-norm laws, determinism."""

import re

import jax
import numpy as np
import pytest
from scipy import stats

from performer import favor


@pytest.mark.parametrize("kind", ["orthogonal", "hadamard", "givens"])
@pytest.mark.parametrize("m", [3, 8, 16, 21])  # m < d, m = d, m > d, d does not divide m
def test_structured_blocks_are_orthogonal(kind, m):
  d = 8
  W = np.asarray(favor.projection(jax.random.key(0), m, d, kind, "sqrt_d"), np.float64)
  assert W.shape == (m, d) and W.dtype == np.float64
  np.testing.assert_allclose(np.linalg.norm(W, axis=1), np.sqrt(d), rtol=1e-5)
  for start in range(0, m, d):  # rows inside one block are orthogonal
    block = W[start:start + d] / np.sqrt(d)
    np.testing.assert_allclose(block @ block.T, np.eye(len(block)), atol=1e-5)
  if m > d:  # independent blocks: rows of different blocks are not orthogonal
    assert np.abs(W[:d] @ W[d:2 * d].T).max() > 0.1


@pytest.mark.parametrize("kind", favor.KINDS)
def test_chi_scaling_gives_gaussian_row_norms(kind):
  d, m = 8, 64
  keys = jax.random.split(jax.random.key(1), 40)
  norms = np.concatenate([np.linalg.norm(favor.projection(k, m, d, kind, "chi"), axis=1)
                          for k in keys])
  # Rows of an iid Gaussian matrix have chi(d)-distributed norms.
  assert stats.kstest(norms, stats.chi(d).cdf).pvalue > 1e-3
  assert stats.kstest(norms, stats.chi(d + 2).cdf).pvalue < 1e-6  # the test has power


@pytest.mark.parametrize("kind", ["iid", "orthogonal"])
def test_second_moment_is_identity(kind):
  # E[w w^T] = I_d is what makes the softmax estimators unbiased.
  d, m, n = 6, 6, 3000
  W = jax.vmap(lambda k: favor.projection(k, m, d, kind))(jax.random.split(jax.random.key(2), n))
  second = np.einsum("nmi,nmj->ij", np.asarray(W, np.float64), np.asarray(W, np.float64)) / (n * m)
  np.testing.assert_allclose(second, np.eye(d), atol=0.06)


def test_same_key_same_matrix_and_different_keys_differ():
  for kind in favor.KINDS:
    a = favor.projection(jax.random.key(3), 12, 8, kind)
    b = favor.projection(jax.random.key(3), 12, 8, kind)
    c = favor.projection(jax.random.key(4), 12, 8, kind)
    np.testing.assert_array_equal(a, b)
    assert np.abs(np.asarray(a) - np.asarray(c)).max() > 0.1


@pytest.mark.parametrize("args, match", [
    ((0, 8, "iid", "chi"), "m >= 1"),
    ((4, 8, "gaussian", "chi"), "unknown projection kind"),
    ((4, 8, "iid", "unit"), "unknown projection scaling"),
    ((4, 6, "hadamard", "chi"), "power of two"),
])
def test_bad_arguments_raise(args, match):
  with pytest.raises(ValueError, match=match):
    favor.projection(jax.random.key(0), *args)


def test_a_seed_is_not_a_key_and_both_kinds_of_key_still_work():
  for key, got in ((0, "int 0"), (jax.numpy.zeros(3, "uint32"), "dtype uint32 and shape (3,)"),
                   (jax.random.split(jax.random.key(0), 2), "shape (2,)")):
    with pytest.raises(TypeError, match=rf"^projection needs one jax.random key, got .*"
                                        rf"{re.escape(got)}; pass jax.random.key\(seed\)$"):
      favor.projection(key, m=8, d=16)
  typed = favor.projection(jax.random.key(5), 8, 16)
  np.testing.assert_array_equal(favor.projection(jax.random.PRNGKey(5), 8, 16), typed)
  jitted = jax.jit(lambda k: favor.projection(k, 8, 16))(jax.random.key(5))  # key checks: static
  np.testing.assert_allclose(jitted, typed, rtol=1e-6, atol=1e-6)  # XLA may fuse differently
