"""FAVOR++ / FAVOR# (favor/exponential.py) and simplex projections against their closed forms."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from performer import favor
from performer.favor import exponential, theory
from testlib import qkv

D = 4
KERNELS = favor.DATA_DEPENDENT_KERNELS


def _sides(kernel, xs, ys):
  """(query Side, key Side) from the moments of query and key sets xs, ys: [n, D]."""
  as_moments = lambda a: exponential.moments(jnp.asarray(a, jnp.float32)[None, :, None])
  sides = exponential.parameters(kernel, as_moments(xs), as_moments(ys))
  return [jax.tree.map(lambda a: a[0, 0], side) for side in sides]  # drop [B, H] = [1, 1]


def _anisotropic(seed, n=6):
  """Query and key sets whose coordinates differ in scale and correlate (where DERF helps)."""
  rng = np.random.default_rng(seed)
  mix = np.array([[1.0, 0.6, 0.0, 0.0], [0.0, 0.4, 0.0, 0.0], [0.0, 0.0, 0.2, 0.1],
                  [0.0, 0.0, 0.0, 0.9]])
  xs = rng.normal(size=(n, D)) @ mix * np.array([1.3, 1.0, 0.3, 0.6])
  ys = rng.normal(size=(n, D)) @ mix * np.array([0.4, 0.9, 1.4, 0.5]) + 0.3
  return xs, ys


def _estimates(x, y, sides, m, kind, n=20000, seed=0):
  """n independent estimates phi(x).phi(y) of exp(x.y), each with its own W of m rows."""
  kernel = "positive" if sides is None else "gerf"  # every data-dependent kernel: one form
  qp, kp = (None, None) if sides is None else sides

  def one(key):
    W = favor.projection(key, m, D, kind)
    f = lambda a, p: favor.feature_map(jnp.asarray(a, jnp.float32)[None], W, kernel, params=p)[0]
    return f(x, qp) @ f(y, kp)
  return np.asarray(jax.vmap(one)(jax.random.split(jax.random.key(seed), n)), np.float64)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind", ["iid", "orthogonal", "simplex"])
def test_unbiased(kernel, kind):
  xs, ys = _anisotropic(0)
  x, y = xs[0], ys[1]
  est = _estimates(x, y, _sides(kernel, xs, ys), 4, kind)
  se = est.std() / np.sqrt(len(est))
  assert abs(est.mean() - np.exp(x @ y)) < 4 * se
  assert se < 0.02 * np.exp(x @ y)  # sharp enough to see a wrong D or C


@pytest.mark.parametrize("A", [-0.3, -0.05, 0.0, 0.02])  # A << 1/16: a light-tailed 4th moment
def test_gerf_variance_matches_closed_form(A):
  x, y = np.array([0.5, -0.3, 0.2, 0.4]), np.array([0.1, 0.4, -0.5, 0.3])
  side = exponential.Side(jnp.eye(D), jnp.full((D,), A, jnp.float32))
  est = _estimates(x, y, (side, side), 1, "iid", n=200000)
  expected = theory.exponential_variance(x, y, A)
  var, se = est.var(), np.std((est - est.mean()) ** 2) / np.sqrt(len(est))
  assert abs(var - expected) < 4 * se and se < 0.1 * expected
  if A == 0.0:  # FAVOR+: m = 1 times Lemma 2's MSE
    np.testing.assert_allclose(expected, theory.softmax_kernel_mse(x, y, 1, "positive"))


def test_variance_formula_takes_transforms_per_coordinate():
  """DERF's form equals GERF's after rotating both inputs by the same Q (the formula, not MC)."""
  rng = np.random.default_rng(3)
  x, y = rng.normal(size=D) * 0.6, rng.normal(size=D) * 0.6
  Q = np.linalg.qr(rng.normal(size=(D, D)))[0]
  for A in (-0.2, 0.0):
    np.testing.assert_allclose(theory.exponential_variance(x, y, A, Q, Q),
                               theory.exponential_variance(x, y, A), rtol=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.05, 0.5, 2.0, 10.0])
def test_optimal_a_is_the_grid_minimum(rho):
  x = np.zeros(D)
  y = np.full(D, np.sqrt(rho))  # |x + y|^2 / d = rho
  grid = np.linspace(-3.0, 0.124, 200001)
  log_excess = np.log(theory.exponential_variance(x, y, grid[:, None] * np.ones(D)) + np.exp(
      2 * x @ y))  # log E[f^2 f^2]: the variance plus SM^2, a constant in A
  best = grid[np.argmin(log_excess)]
  assert abs(float(exponential.optimal_a(rho)) - best) < 2e-5 + 1e-3 * abs(best)


def _relative_variance(kernel, xs, ys, invert_psi=False):
  """One feature's variance over SM(x, y)^2, averaged over every pair (x_i, y_j).

  Relative: attention divides by D, so an error relative to the kernel's
  value is what reaches its weights.
  """
  if kernel == "positive":
    sides = (exponential.Side(np.eye(D), np.zeros(D)),) * 2
  else:
    sides = _sides(kernel, xs, ys)
  qs, ks = jax.tree.map(np.asarray, sides)
  if invert_psi:  # Psi^-1 on queries, Psi on keys, and A* for that choice
    qs, ks = qs._replace(transform=ks.transform), ks._replace(transform=qs.transform)
    rho = np.mean([np.sum((x @ qs.transform + y @ ks.transform) ** 2) for x in xs for y in ys]) / D
    qs = ks = qs._replace(A=np.full(D, float(exponential.optimal_a(rho))))
  return np.mean([theory.exponential_variance(x, y, qs.A, qs.transform, ks.transform)
                  / np.exp(2 * x @ y) for x in xs for y in ys])


@pytest.mark.parametrize("seed", range(5))
def test_each_estimator_lowers_the_variance_where_the_theory_says(seed):
  xs, ys = _anisotropic(seed)
  favor_plus = _relative_variance("positive", xs, ys)
  gerf = _relative_variance("gerf", xs, ys)
  assert gerf < favor_plus  # A = 0 is one of GERF's choices
  assert _relative_variance("derf", xs, ys) < gerf  # per-direction A on correlated inputs
  assert _relative_variance("saderf", xs, ys) < gerf  # queries and keys of different scales


@pytest.mark.parametrize("seed", range(5))
def test_saderf_scales_queries_by_psi_not_its_inverse(seed):
  xs, ys = _anisotropic(seed)
  derived, inverse = (_relative_variance("saderf", xs, ys, invert) for invert in (False, True))
  assert derived < inverse


def test_gerf_gain_over_favor_plus_grows_with_the_input_norm():
  rng = np.random.default_rng(0)
  ratios = []
  for scale in (0.3, 1.0, 2.0):
    xs, ys = rng.normal(size=(6, D)) * scale, rng.normal(size=(6, D)) * scale
    ratios.append(_relative_variance("positive", xs, ys) / _relative_variance("gerf", xs, ys))
  assert ratios[0] < ratios[1] < ratios[2] and ratios[2] > 10, ratios


@pytest.mark.parametrize("kernel", ["positive", "gerf"])
def test_orthogonal_and_simplex_coupling_lower_the_mse(kernel):
  x, y = np.array([0.6, -0.4, 0.3, 0.5]), np.array([0.5, 0.2, -0.3, 0.6])
  sides = None if kernel == "positive" else _sides("gerf", x[None], y[None])
  mse = {kind: np.mean((_estimates(x, y, sides, D, kind, n=40000, seed=1) - np.exp(x @ y)) ** 2)
         for kind in ("iid", "orthogonal", "simplex")}
  assert mse["simplex"] < mse["orthogonal"] < mse["iid"], mse


def test_simplex_rows_are_a_rotated_simplex_with_chi_norms():
  W = np.asarray(favor.projection(jax.random.key(0), 2 * D + 1, D, "simplex"), np.float64)
  for block in (W[:D], W[D:2 * D]):
    unit = block / np.linalg.norm(block, axis=1, keepdims=True)
    np.testing.assert_allclose(unit @ unit.T, np.where(np.eye(D), 1.0, -1 / (D - 1)), atol=1e-6)
  norms = np.linalg.norm(np.asarray(favor.projection(jax.random.key(1), 4000, D, "simplex")), axis=1)
  assert abs(np.mean(norms ** 2) - D) < 0.1  # chi(d): E|w|^2 = d
  with pytest.raises(ValueError, match="d >= 2"):
    favor.projection(jax.random.key(0), 3, 1, "simplex")


# Attention with data-dependent kernels.

B, L, H, M = 2, 21, 3, 16


def _qkv(seed=0, scale=1.0):
  return qkv((B, L, H, D), seed, scale)


def _W(seed=7):
  return favor.projection(jax.random.key(seed), M, D)


def _explicit(q, k, v, W, kernel, sides, causal=False, mask=None):
  """D^-1 (A V) with A = Q' K'^T from explicit features (float64 sums)."""
  s = D ** -0.25
  f = lambda x, side: favor.feature_map(jnp.swapaxes(x * s, 1, 2), W, kernel, params=side)
  a = np.einsum("bhqm,bhkm->bhqk", f(q, sides[0]), f(k, sides[1])).astype(np.float64)
  if causal:
    a = a * np.tril(np.ones(a.shape[-2:]))
  if mask is not None:
    a = a * np.asarray(mask)[:, None, None, :]
  return np.einsum("bhqk,bkhd->bqhd", a, v) / a.sum(-1).transpose(0, 2, 1)[..., None]


@pytest.mark.parametrize("kernel", KERNELS)
def test_bidirectional_takes_parameters_from_the_real_tokens(kernel):
  q, k, v = _qkv()
  mask = np.ones((B, L), bool)
  mask[1, 15:] = False
  garbage = jnp.where(jnp.asarray(mask)[:, :, None, None], k, 3.0)
  s = D ** -0.25
  stats = (exponential.moments(q * s, jnp.asarray(mask)), exponential.moments(k * s,
                                                                               jnp.asarray(mask)))
  sides = exponential.parameters(kernel, *stats)  # [B, H, ...]
  got = favor.favor_attention(q, garbage, v, _W(), kernel=kernel, mask=jnp.asarray(mask))
  np.testing.assert_allclose(got, _explicit(q, k, v, _W(), kernel, sides, mask=mask), rtol=1e-4,
                             atol=1e-5)
  # The padded keys change neither the parameters nor the outputs of real queries.
  np.testing.assert_allclose(got[1, :15], favor.favor_attention(
      q[1:, :15], k[1:, :15], v[1:, :15], _W(), kernel=kernel)[0], rtol=1e-5, atol=1e-6)
  blocked = favor.favor_attention(q, garbage, v, _W(), kernel=kernel, mask=jnp.asarray(mask),
                                  chunk_size=4)
  np.testing.assert_allclose(blocked, got, rtol=1e-5, atol=1e-6)


def _head_stats(seed):
  """Per-head moments from other sequences: what a layer's running averages hold."""
  q, k, _ = _qkv(seed)
  mean = lambda m: jax.tree.map(lambda a: jnp.mean(a, axis=0), m)  # over the batch: [H, ...]
  return tuple(mean(exponential.moments(x * D ** -0.25)) for x in (q, k))


@pytest.mark.parametrize("kernel", KERNELS)
def test_causal_needs_outside_statistics_and_then_matches_the_oracle(kernel):
  q, k, v = _qkv(1)
  with pytest.raises(ValueError, match="outside the sequence"):
    favor.favor_attention(q, k, v, _W(), kernel=kernel, causal=True)
  stats = _head_stats(5)
  sides = exponential.parameters(kernel, *stats)  # [H, ...]
  for chunk in (1, 4, 16):
    got = favor.favor_attention(q, k, v, _W(), kernel=kernel, causal=True, statistics=stats,
                                chunk_size=chunk)
    np.testing.assert_allclose(got, _explicit(q, k, v, _W(), kernel, sides, causal=True),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_causal_outputs_never_see_later_tokens(kernel):
  q, k, v = _qkv(3, scale=2.0)
  stats = _head_stats(6)
  run = functools.partial(favor.favor_attention, W=_W(), kernel=kernel, causal=True,
                          statistics=stats, chunk_size=8)
  base = run(q, k, v)
  for i in (0, 7, 13):
    bump = 3.0 * jax.random.normal(jax.random.key(i), (3, B, L - i - 1, H, D))
    q2, k2, v2 = (x.at[:, i + 1:].add(b) for x, b in zip((q, k, v), bump))
    out = run(q2, k2, v2)
    np.testing.assert_array_equal(out[:, :i + 1], base[:, :i + 1])  # bit for bit
    assert not np.allclose(out[:, i + 1:], base[:, i + 1:])


@pytest.mark.parametrize("kernel", KERNELS)
def test_decoding_equals_the_causal_pass(kernel):
  q, k, v = _qkv(4)
  stats = _head_stats(7)
  expected = favor.favor_attention(q, k, v, _W(), kernel=kernel, causal=True, statistics=stats)
  sides = tuple(jax.tree.map(lambda a: jnp.broadcast_to(a, (B,) + a.shape), side)
                for side in exponential.parameters(kernel, *stats))
  state = favor.causal_decode_init(B, H, M, D)
  for t in range(L):
    state, out = favor.causal_decode_step(state, q[:, t], k[:, t], v[:, t], _W(), kernel=kernel,
                                          params=sides)
    np.testing.assert_allclose(out, expected[:, t], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_match_float64_autodiff(kernel, causal):
  q, k, v = (x[:1, :9] for x in _qkv(8, scale=0.8))
  stats = _head_stats(9) if causal else None
  g = jax.random.normal(jax.random.key(2), v.shape)
  loss = lambda q, k, v: jnp.sum(g * favor.favor_attention(q, k, v, _W(), kernel=kernel,
                                                           causal=causal, statistics=stats,
                                                           chunk_size=4))
  got = jax.grad(loss, argnums=(0, 1, 2))(q, k, v)
  s = D ** -0.25
  if stats is None:  # the parameters are chosen, not differentiated: fixed at their value
    stats = tuple(exponential.moments(x * s) for x in (q, k))
  sides = exponential.parameters(kernel, *stats)
  with jax.enable_x64(True):
    W, g64 = (jnp.asarray(np.asarray(x), jnp.float64) for x in (_W(), g))
    sides = jax.tree.map(lambda a: jnp.asarray(np.asarray(a), jnp.float64), sides)

    def phi(x, side):  # independent of features.py: [B, L, H, d] -> [B, H, L, M], float64
      A = jnp.broadcast_to(side.A, (1, H, D))[:, :, None, :]
      z = jnp.swapaxes(x * s, 1, 2) @ jnp.broadcast_to(side.transform, (1, H, D, D))
      log = (jnp.einsum("bhld,md->bhlm", z * jnp.sqrt(1 - 4 * A), W)
             + jnp.einsum("md,bhld->bhlm", W ** 2, A) + 0.25 * jnp.sum(jnp.log(1 - 4 * A), -1,
                                                                       keepdims=True)
             - 0.5 * jnp.sum(z ** 2, -1, keepdims=True))
      return jnp.exp(log) / np.sqrt(M)

    def reference(q, k, v):
      a = jnp.einsum("bhqm,bhkm->bhqk", phi(q, sides[0]), phi(k, sides[1]))
      if causal:
        a = a * jnp.tril(jnp.ones(a.shape[-2:]))
      out = jnp.einsum("bhqk,bkhd->bqhd", a, v) / jnp.swapaxes(a.sum(-1), 1, 2)[..., None]
      return jnp.sum(g64 * out)

    want = jax.grad(reference, argnums=(0, 1, 2))(*(jnp.asarray(np.asarray(x), jnp.float64)
                                                    for x in (q, k, v)))
    want = [np.asarray(w) for w in want]
  for a, b in zip(got, want):
    assert np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * np.abs(b).max())


def test_bad_arguments_raise():
  q, k, v = _qkv()
  with pytest.raises(ValueError, match="takes no statistics"):
    favor.favor_attention(q, k, v, _W(), statistics=_head_stats(0))
  with pytest.raises(ValueError, match="needs parameters"):
    favor.feature_map(q, _W(), "gerf")
  with pytest.raises(ValueError, match="needs a projection"):
    favor.favor_attention(q, k, v, None, kernel="gerf")
  with pytest.raises(ValueError, match="data-dependent kernels are"):
    exponential.parameters("positive", *_head_stats(0))
