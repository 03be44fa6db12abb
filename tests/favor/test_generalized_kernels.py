"""Generalized kernels (Sec. 2.2, App. D.3): each map by its formula, FAVOR against D^-1 A V."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from performer import attention, favor
from testlib import qkv

B, L, H, D, M = 2, 37, 3, 8, 11  # prime-ish sizes make shape mix-ups fail loudly
# f of phi(x) = f(W x) / sqrt(m) + eps, written independently of features.py.
F = {
    "relu": lambda u: np.maximum(u, 0.0),
    "elu_plus_one": lambda u: np.where(u > 0, u + 1.0, np.exp(np.minimum(u, 0.0))),
    "identity": lambda u: u,
    "sigmoid": lambda u: 1.0 / (1.0 + np.exp(-u)),
    "abs": np.abs,
    "gelu": lambda u: 0.5 * u * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (u + 0.044715 * u ** 3))),
    "tanh": np.tanh,
}
# The kernels test_attention.py leaves to this file. eps = 0.3 keeps D away from 0 for
# the sign-changing ones (identity, tanh, gelu), so float32 can be held to 2e-5.
NEW = ("identity", "sigmoid", "abs", "gelu", "tanh")
EPS = 0.3


def _np_features(x, W, kernel, eps):
  """phi(x) in float64 numpy: [..., d] -> [..., m]."""
  u = np.einsum("...d,md->...m", np.asarray(x, np.float64), np.asarray(W, np.float64))
  if kernel == "exp":
    return np.exp(u) / np.sqrt(W.shape[0])
  return F[kernel](u) / np.sqrt(W.shape[0]) + eps


def _explicit(q, k, v, W, kernel, eps, causal, mask, renormalize=True):
  """D^-1 (Q' K'^T) V built as an L x L matrix in float64, with q, k scaled by d^(-1/4);
  (Q' K'^T) V without D^-1 when not renormalize (App. D.3)."""
  s = D ** -0.25
  a = np.einsum("bqhm,bkhm->bhqk", _np_features(q * s, W, kernel, eps),
                _np_features(k * s, W, kernel, eps))
  if causal:
    a = a * np.tril(np.ones(a.shape[-2:]))
  a = a * np.asarray(mask, np.float64)[:, None, None, :]
  out = np.einsum("bhqk,bkhd->bqhd", a, np.asarray(v, np.float64))
  return out / a.sum(-1).transpose(0, 2, 1)[..., None] if renormalize else out


def _qkv(seed=0, length=L):
  return qkv((B, length, H, D), seed)


def test_feature_maps_match_their_formulas():
  x = jax.random.normal(jax.random.key(3), (5, D)) * 1.5
  W = favor.projection(jax.random.key(4), M, D, "iid")
  for kernel in set(favor.GENERALIZED_KERNELS) - set(favor.DETERMINISTIC_ONLY):  # taylor: test_backends
    eps = 0.0 if kernel == "exp" else 1e-2
    got = favor.feature_map(x, W, kernel, kernel_epsilon=eps)
    assert got.dtype == jnp.float32 and got.shape == (5, M)
    np.testing.assert_allclose(got, _np_features(x, W, kernel, eps), rtol=1e-5, atol=1e-6,
                               err_msg=kernel)
    if kernel != "exp":  # without W: phi(x) = f(x) + eps
      np.testing.assert_allclose(favor.feature_map(x, None, kernel, kernel_epsilon=eps),
                                 F[kernel](np.asarray(x, np.float64)) + eps, rtol=1e-5, atol=1e-6,
                                 err_msg=kernel)
  assert set(NEW) <= set(favor.KERNELS) and set(NEW) <= set(favor.GENERALIZED_KERNELS)
  # gelu is the tanh approximation, within 5e-4 of the erf form (features.py says so).
  u = np.linspace(-6, 6, 2401)
  exact = 0.5 * u * (1 + erf(u / np.sqrt(2)))
  gap = np.abs(np.asarray(favor.feature_map(jnp.asarray(u)[:, None], None, "gelu"))[:, 0] - exact)
  assert 1e-4 < gap.max() < 5e-4  # not the erf form itself, and close to it
  assert float(favor.feature_map(jnp.array([[-3.0]]), None, "sigmoid")[0, 0]) == pytest.approx(
      1 / (1 + np.exp(3.0)), rel=1e-6)


@pytest.mark.parametrize("kernel", NEW)
@pytest.mark.parametrize("causal, block", [(False, 5), (True, 16)])  # several blocks, a ragged last
def test_favor_attention_equals_explicit_formula(kernel, causal, block):
  q, k, v = _qkv(1)
  W = favor.projection(jax.random.key(7), M, D)
  mask = np.ones((B, L), bool)
  mask[1, 29:] = False  # padded keys enter neither the numerator nor D
  got = favor.favor_attention(q, k, v, W, kernel=kernel, causal=causal, mask=jnp.asarray(mask),
                              chunk_size=block, kernel_epsilon=EPS)
  assert got.shape == (B, L, H, D) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, _explicit(q, k, v, W, kernel, EPS, causal, mask), rtol=2e-5,
                             atol=2e-5)


@pytest.mark.parametrize("kernel", NEW)
def test_performer_backend_decodes_each_kernel_token_by_token(kernel):
  """performer_relu with another kernel: causal __call__ and decode_step both equal D^-1 A V."""
  length = 13
  layer = attention.make("performer_relu", num_heads=H, head_dim=D, max_len=length,
                         rngs=None, kernel=kernel, num_features=M, kernel_epsilon=EPS)
  assert layer.kernel == kernel
  q, k, v = _qkv(2, length)
  expected = _explicit(q, k, v, layer.W[...], kernel, EPS, True, np.ones((B, length), bool))
  np.testing.assert_allclose(layer(q, k, v, causal=True), expected, rtol=2e-5, atol=2e-5)
  cache, outs = layer.decode_init(B, H, D), []
  for t in range(length):
    cache, out = layer.decode_step(cache, q[:, t], k[:, t], v[:, t])
    outs.append(out)
  np.testing.assert_allclose(jnp.stack(outs, 1), expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kernel", ("relu", "tanh", "elu_plus_one"))
@pytest.mark.parametrize("causal, block", [(False, 5), (True, 16)])
def test_without_renormalization_favor_is_the_numerator_alone(kernel, causal, block):
  # App. D.3: Q' ((K')^T V), or the causal prefix sums' numerator; padded keys still add nothing.
  q, k, v = _qkv(3)
  W = favor.projection(jax.random.key(8), M, D)
  mask = np.ones((B, L), bool)
  mask[0, 20:] = False
  got = favor.favor_attention(q, k, v, W, kernel=kernel, causal=causal, mask=jnp.asarray(mask),
                              chunk_size=block, kernel_epsilon=EPS, renormalize=False)
  expected = _explicit(q, k, v, W, kernel, EPS, causal, mask, renormalize=False)
  np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-4)
  assert not np.allclose(got, _explicit(q, k, v, W, kernel, EPS, causal, mask), atol=1e-2)
  if causal:  # no leak: later tokens change no earlier output
    later = jnp.asarray(k).at[:, 25:].multiply(-3.0)
    moved = favor.favor_attention(q, later, v, W, kernel=kernel, causal=True, chunk_size=block,
                                  mask=jnp.asarray(mask), kernel_epsilon=EPS, renormalize=False)
    np.testing.assert_array_equal(moved[:, :25], got[:, :25])


def test_a_layer_without_renormalization_decodes_its_own_rows_and_softmax_refuses():
  length = 13
  layer = attention.make("performer_relu", num_heads=H, head_dim=D, max_len=length,
                         rngs=None, num_features=M, kernel_epsilon=EPS, renormalize=False)
  q, k, v = _qkv(4, length)
  expected = _explicit(q, k, v, layer.W[...], "relu", EPS, True, np.ones((B, length), bool),
                       renormalize=False)
  np.testing.assert_allclose(layer(q, k, v, causal=True), expected, rtol=2e-5, atol=2e-4)
  cache, outs = layer.decode_init(B, H, D), []
  for t in range(length):
    cache, out = layer.decode_step(cache, q[:, t], k[:, t], v[:, t])
    outs.append(out)
  np.testing.assert_allclose(jnp.stack(outs, 1), expected, rtol=2e-5, atol=2e-4)
  with pytest.raises(ValueError, match="renormalize=False needs a generalized kernel without exponential"):
    attention.make("performer_softmax", num_heads=H, head_dim=D, max_len=length, rngs=None,
                   renormalize=False)
  with pytest.raises(ValueError, match="'positive' is exponential"):
    favor.favor_attention(q, k, v, favor.projection(jax.random.key(0), M, D),
                          renormalize=False)
