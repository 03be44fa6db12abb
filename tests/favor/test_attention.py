"""softmax_attention and favor_attention against independent computations."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from performer import favor
from testlib import qkv

B, L, H, D, M = 2, 37, 3, 8, 11  # prime-ish sizes make shape mix-ups fail loudly
# identity and the App. D.3 kernels: test_generalized_kernels.py (identity's and tanh's D nears 0
# here); taylor, which takes no W: tests/attention/test_backends.py; the data-dependent kernels:
# test_exponential.py
ALL = [(k, 1e-3 if k == "relu" else 0.0) for k in favor.KERNELS
       if k not in ("identity", "sigmoid", "abs", "gelu", "tanh", *favor.DETERMINISTIC_ONLY,
                    *favor.DATA_DEPENDENT_KERNELS)]


def _qkv(seed=0, scale=1.0, length=L, dtype=jnp.float32):
  return qkv((B, length, H, D), seed, scale, dtype, scale_values=False)


def _W(m=M, seed=7, kind="orthogonal"):
  return favor.projection(jax.random.key(seed), m, D, kind)


def _explicit(q, k, v, W, kernel, eps, causal, mask=None):
  """D^-1 (A V) with A = Q' K'^T built explicitly: the unstabilized estimator."""
  s = D ** -0.25
  qp = favor.feature_map(q * s, W, kernel, kernel_epsilon=eps)
  kp = favor.feature_map(k * s, W, kernel, kernel_epsilon=eps)
  a = np.einsum("bqhm,bkhm->bhqk", qp, kp).astype(np.float64)
  if causal:
    a = a * np.tril(np.ones(a.shape[-2:]))
  if mask is not None:
    a = a * np.asarray(mask)[:, None, None, :]
  out = np.einsum("bhqk,bkhd->bqhd", a, v) / a.sum(-1).transpose(0, 2, 1)[..., None]
  return out


def test_softmax_attention_matches_numpy():
  q, k, v = _qkv()
  mask = np.ones((B, L), bool)
  mask[1, 30:] = False
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
  for causal in (False, True):
    allowed = mask[:, None, None, :] & (np.tril(np.ones((L, L), bool)) if causal else True)
    p = np.where(allowed, np.exp(logits - logits.max(-1, keepdims=True)), 0.0)
    expected = np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)
    got = favor.softmax_attention(q, k, v, causal=causal, mask=jnp.asarray(mask))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel, eps", ALL)
@pytest.mark.parametrize("block", [None, 1, 5, 16])  # None: one block (L=37 < default)
def test_bidirectional_equals_explicit_formula(kernel, eps, block):
  q, k, v = _qkv()
  W = None if kernel in ("relu", "elu_plus_one", "exp") and eps else _W()
  got = favor.favor_attention(q, k, v, W, kernel=kernel, kernel_epsilon=eps, chunk_size=block)
  np.testing.assert_allclose(got, _explicit(q, k, v, W, kernel, eps, False), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("block", [None, 4, 7])
def test_bidirectional_blocks_with_fewer_keys_than_queries(block):
  q, k, v = _qkv(11)
  k, v = k[:, :13], v[:, :13]  # Lq = 37 queries over Lk = 13 keys
  W = _W()
  got = favor.favor_attention(q, k, v, W, chunk_size=block)
  s = D ** -0.25
  qp, kp = favor.feature_map(q * s, W), favor.feature_map(k * s, W)
  a = np.einsum("bqhm,bkhm->bhqk", qp, kp).astype(np.float64)
  expected = np.einsum("bhqk,bkhd->bqhd", a, v) / a.sum(-1).transpose(0, 2, 1)[..., None]
  np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kernel, eps", ALL)
@pytest.mark.parametrize("chunk, span", [  # 37 is not a multiple of any; span None: all at once
    (1, None), (3, None), (3, 3), (16, None), (16, 16), (16, 32), (64, None)])
def test_causal_chunks_equal_per_token_oracle(kernel, eps, chunk, span):
  q, k, v = _qkv(1)
  W = _W()
  s = D ** -0.25
  oracle = favor.causal_linear_attention_scan(
      favor.feature_map(q * s, W, kernel, kernel_epsilon=eps),
      favor.feature_map(k * s, W, kernel, kernel_epsilon=eps), v)
  got = favor.favor_attention(q, k, v, W, kernel=kernel, causal=True, chunk_size=chunk,
                              span=span or L, kernel_epsilon=eps)
  np.testing.assert_allclose(got, oracle, rtol=2e-5, atol=2e-5)
  np.testing.assert_allclose(oracle, _explicit(q, k, v, W, kernel, eps, True), rtol=2e-5, atol=2e-5)


def test_favor_approaches_exact_attention_as_m_grows():
  q, k, v = _qkv(2, scale=0.5)
  for causal in (False, True):
    exact = favor.softmax_attention(q, k, v, causal=causal)
    errors = []
    for m in (16, 64, 256, 1024, 4096):
      err = [np.mean((favor.favor_attention(q, k, v, _W(m, seed), causal=causal) - exact) ** 2)
             for seed in range(3)]
      errors.append(np.mean(err))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-4 and errors[0] / errors[-1] > 50  # ~1/m decay


@pytest.mark.parametrize("causal_fn", [
    functools.partial(favor.favor_attention, kernel="positive", chunk_size=8),
    functools.partial(favor.favor_attention, kernel="positive", chunk_size=8, span=8),
    functools.partial(favor.favor_attention, kernel="positive", chunk_size=4, span=16),
    functools.partial(favor.favor_attention, kernel="positive", chunk_size=64),
    functools.partial(favor.favor_attention, kernel="trig", chunk_size=5),
    functools.partial(favor.favor_attention, kernel="relu", kernel_epsilon=1e-3, chunk_size=8),
    lambda q, k, v, W, causal: favor.softmax_attention(q, k, v, causal=causal),
])
def test_future_tokens_never_change_past_outputs(causal_fn):
  q, k, v = _qkv(3, scale=2.0)
  base = causal_fn(q, k, v, _W(), causal=True)
  for i in (0, 5, 19, 35):
    key = jax.random.key(i)
    bump = 10.0 * jax.random.normal(key, (3, B, L - i - 1, H, D))
    q2, k2, v2 = (x.at[:, i + 1:].add(b) for x, b in zip((q, k, v), bump))
    out = causal_fn(q2, k2, v2, _W(), causal=True)
    np.testing.assert_array_equal(out[:, :i + 1], base[:, :i + 1])  # bit for bit
    assert not np.allclose(out[:, i + 1:], base[:, i + 1:])


@pytest.mark.parametrize("kernel, eps", [("positive", 0.0), ("trig", 0.0), ("relu", 1e-3)])
def test_padding_never_changes_real_outputs(kernel, eps):
  q, k, v = _qkv(4)
  W = _W()
  real = 23
  # Bidirectional: any pattern of padded keys equals attention over the kept keys.
  mask = np.array(jax.random.bernoulli(jax.random.key(9), 0.6, (B, L)))
  mask[:, 0] = True
  mask[:, 6:12] = False  # with blocks of 6 below, one block holds only padding
  garbage = jnp.where(jnp.asarray(mask)[:, :, None, None], k, 50.0)
  got = favor.favor_attention(q, garbage, v, W, kernel=kernel, mask=jnp.asarray(mask),
                              kernel_epsilon=eps)
  blocked = favor.favor_attention(q, garbage, v, W, kernel=kernel, mask=jnp.asarray(mask),
                                  kernel_epsilon=eps, chunk_size=6)
  np.testing.assert_allclose(blocked, got, rtol=1e-4 if kernel == "trig" else 1e-5, atol=1e-6)
  for b in range(B):
    kept = np.flatnonzero(mask[b])
    alone = favor.favor_attention(q[b:b + 1], k[b:b + 1, kept], v[b:b + 1, kept], W,
                                  kernel=kernel, kernel_epsilon=eps)
    # trig's D can be near 0 (outputs of +-60 here), hence the looser rtol.
    np.testing.assert_allclose(got[b:b + 1], alone, rtol=1e-4 if kernel == "trig" else 1e-5,
                               atol=1e-6)
  # Causal: right padding of any content leaves real positions unchanged bit for bit, and of
  # any length up to rounding (a pass over all chunks at once is a program of another shape,
  # whose products XLA may tile differently); the sequential pass, bit for bit.
  mask = jnp.broadcast_to(jnp.arange(L)[None, :] < real, (B, L))
  for span in (8, None):  # one chunk per step; all chunks at once (the CPU's default is 128)
    attend = functools.partial(favor.favor_attention, W=W, kernel=kernel, causal=True,
                               chunk_size=8, span=span or L, kernel_epsilon=eps)
    alone = attend(q[:, :real], k[:, :real], v[:, :real])
    padded = [attend(q, k.at[:, real:].set(pad_value), v, mask=mask)[:, :real]
              for pad_value in (0.0, 50.0)]
    np.testing.assert_array_equal(padded[0], padded[1])
    if span:
      np.testing.assert_array_equal(padded[0], alone)
    np.testing.assert_allclose(padded[0], alone, rtol=1e-5 if kernel == "trig" else 1e-6,
                               atol=1e-6)  # trig: D near 0 amplifies rounding, as above


@pytest.mark.parametrize("causal, scale", [  # mean |x| after d^-1/4: 6.2, 12.4, 18.6
    (False, 4.0), (True, 4.0), (False, 8.0), (True, 8.0), (False, 12.0), (True, 12.0)])
def test_large_norms_stay_finite_and_exact(causal, scale):
  # exp(-|x|^2/2) underflows float32 for |x| > 13.2, so subtracting max(w.x)
  # alone gives 0/0 there; ours must stay exact.
  q, k, v = _qkv(5, scale=scale)
  W = _W(64)
  got = favor.favor_attention(q, k, v, W, causal=causal, chunk_size=16)
  np.testing.assert_allclose(got, _log_space_reference(q, k, v, W, causal), atol=5e-5)


@pytest.mark.parametrize("norm", [14.0, 20.0, 25.0, 40.0])  # means; maxima up to 1.6x
def test_causal_is_as_exact_as_bidirectional_at_large_norms(norm):
  # The regime: Gaussian q, k whose scaled norms average 14-25 gave
  # finite causal outputs off by order 1 while bidirectional stayed exact.
  d, m, length = 16, 32, 300
  ks = jax.random.split(jax.random.key(0), 4)
  q, k = (norm / d ** 0.25 * jax.random.normal(kk, (1, length, 2, d)) for kk in ks[:2])
  v = jax.random.normal(ks[2], (1, length, 2, d))
  W = favor.projection(ks[3], m, d, "orthogonal")
  for causal in (False, True):
    want = _log_space_reference(q, k, v, W, causal)
    got = favor.favor_attention(q, k, v, W, causal=causal)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-5


def test_a_sequence_of_one_chunk_equals_the_sequential_pass_with_masked_keys():
  # One chunk holds the whole sequence: no state before or after, features kept for the
  # backward pass; masked keys (the first among them) weigh nothing, as chunk by chunk.
  q, k, v = _qkv(6, scale=1.5)
  W = _W()
  mask = jnp.asarray(jax.random.bernoulli(jax.random.key(3), 0.7, (B, L))).at[:, 0].set(False)
  attend = lambda chunk, span: lambda q, k, v: favor.favor_attention(
      q, k, v, W, causal=True, mask=mask, chunk_size=chunk, span=span)
  np.testing.assert_allclose(attend(64, None)(q, k, v), attend(8, 8)(q, k, v), rtol=1e-5,
                             atol=1e-6)
  grad = lambda f: jax.grad(lambda *x: jnp.sum(jnp.sin(f(*x))), argnums=(0, 1, 2))(q, k, v)
  for one, sequential in zip(grad(attend(64, None)), grad(attend(8, 8))):
    np.testing.assert_allclose(one, sequential, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("chunk, span", [  # one chunk per step; all chunks at once; one chunk
    (16, 16), (16, None), (64, None)])
def test_large_norm_keys_take_the_exact_path_and_stay_causal(chunk, span):
  q, k, v = _qkv(3, scale=2.0)
  W = _W()
  big = k * 15.0  # scaled norms ~50
  base = favor.favor_attention(q, big, v, W, causal=True, chunk_size=chunk, span=span)
  # Smaller keys have far larger logs w.x - |x|^2/2: they outgrow the reference.
  k2 = big.at[:, 20:].divide(15.0)
  got = favor.favor_attention(q, k2, v, W, causal=True, chunk_size=chunk, span=span)
  np.testing.assert_array_equal(got[:, :20], base[:, :20])  # bit for bit
  np.testing.assert_allclose(got, _log_space_reference(q, k2, v, W, True), atol=5e-5)
  state = favor.causal_decode_init(B, H, M, D)
  for t in range(L):  # the decoding recursion agrees
    state, out = favor.causal_decode_step(state, q[:, t], k2[:, t], v[:, t], W)
    np.testing.assert_allclose(out, got[:, t], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_max_norm_limit_both_sides(causal):
  d = 16
  q, k, v = (jax.random.normal(kk, (1, 40, 1, d)) for kk in jax.random.split(jax.random.key(4), 3))
  unit = lambda x: x / jnp.linalg.norm(x, axis=-1, keepdims=True) * d ** 0.25  # scaled norm 1
  q, k = unit(q), unit(k) * 0.5
  W = favor.projection(jax.random.key(1), 32, d)
  below = k.at[:, 25].multiply(favor.MAX_NORM * 0.99 * 2)  # scaled norm 99
  above = k.at[:, 25].multiply(favor.MAX_NORM * 1.01 * 2)  # 101
  x, y = np.asarray(q), np.asarray(below)
  got = favor.favor_attention(q, below, v, W, causal=causal)
  np.testing.assert_allclose(got, _log_space_reference(x, y, v, W, causal), atol=1e-4)
  with pytest.raises(ValueError, match="MAX_NORM"):
    favor.favor_attention(q, above, v, W, causal=causal)
  with pytest.raises(ValueError, match="MAX_NORM"):
    favor.favor_attention(q.at[:, 3].multiply(101.0), k, v, W, causal=causal)
  # Traced: NaN from the offending key on (all queries bidirectionally).
  jitted = jax.jit(functools.partial(favor.favor_attention, causal=causal))(q, above, v, W)
  nan = np.isnan(np.asarray(jitted)).any(axis=(0, 2, 3))
  np.testing.assert_array_equal(nan, np.arange(40) >= (25 if causal else 0))
  if causal:
    np.testing.assert_allclose(jitted[:, :25], got[:, :25], rtol=1e-6, atol=1e-6)
  # A padded key past the limit is never read.
  mask = jnp.ones((1, 40), bool).at[:, 25].set(False)
  padded = favor.favor_attention(q, above, v, W, causal=causal, mask=mask)
  assert np.isfinite(padded).all()


def _log_space_reference(q, k, v, W, causal):
  """The positive-feature estimator evaluated in float64 log space (no overflow)."""
  d, length = q.shape[-1], q.shape[1]
  s = d ** -0.25
  x, y = np.asarray(q, np.float64) * s, np.asarray(k, np.float64) * s
  W = np.asarray(W, np.float64)
  a = np.einsum("blhd,md->blhm", x, W) - 0.5 * (x ** 2).sum(-1, keepdims=True)
  b = np.einsum("blhd,md->blhm", y, W) - 0.5 * (y ** 2).sum(-1, keepdims=True)
  logw = logsumexp(a[:, :, None] + b[:, None, :], axis=-1)  # [B, Lq, Lk, H]
  if causal:
    logw = np.where(np.tril(np.ones((length, length), bool))[None, :, :, None], logw, -np.inf)
  p = np.exp(logw - logw.max(2, keepdims=True))
  return np.einsum("bqkh,bkhd->bqhd", p / p.sum(2, keepdims=True), np.asarray(v, np.float64))


@pytest.mark.parametrize("causal, span", [(False, None), (True, 128), (True, 2048)])
def test_bf16_inputs_accumulate_in_float32(causal, span):
  length = 2048  # long sums: bf16 accumulators would lose ~all precision
  q, k, v = _qkv(6, scale=3.0, length=length, dtype=jnp.bfloat16)
  W = _W(32)
  attend = functools.partial(favor.favor_attention, W=W, causal=causal, chunk_size=128, span=span)
  got = attend(q, k, v)
  assert got.dtype == jnp.bfloat16
  as_f32 = attend(*(x.astype(jnp.float32) for x in (q, k, v)))
  assert np.isfinite(np.asarray(got, np.float32)).all()
  np.testing.assert_allclose(np.asarray(got, np.float32), as_f32, rtol=2e-2, atol=2e-2)


def _naive_float64(q, k, v, W, kernel, causal):
  """Independent float64 FAVOR: explicit features, explicit L x L matrix."""
  s = D ** -0.25
  def phi(x):
    wx = jnp.einsum("blhd,md->blhm", x * s, W)
    if kernel == "positive":
      return jnp.exp(wx - 0.5 * jnp.sum((x * s) ** 2, -1, keepdims=True))
    return jnp.exp(0.5 * jnp.sum((x * s) ** 2, -1, keepdims=True)) * jnp.concatenate(
        [jnp.sin(wx), jnp.cos(wx)], -1)  # trig
  a = jnp.einsum("bqhm,bkhm->bhqk", phi(q), phi(k))
  if causal:
    a = a * jnp.tril(jnp.ones((L, L)))
  return jnp.einsum("bhqk,bkhd->bqhd", a, v) / a.sum(-1).transpose(0, 2, 1)[..., None]


@pytest.mark.parametrize("kernel, causal, scale, span, chunk, batch_tokens", [
    ("positive", False, 1.0, None, 8, 0), ("positive", True, 1.0, None, 8, 0),
    ("positive", True, 1.0, 8, 8, 0), ("trig", False, 1.0, None, 8, 0),
    ("trig", True, 1.0, None, 8, 0),
    ("positive", True, 7.0, None, 8, 0), ("positive", True, 7.0, 8, 8, 0),  # scaled norms ~12:
    ("positive", True, 1.0, None, 64, 0), ("positive", True, 7.0, None, 64, 0),  # keys outgrow
    ("positive", True, 7.0, None, 64, L), ("positive", False, 1.0, None, 8, L)])  # references;
def test_gradients_match_float64_autodiff(kernel, causal, scale, span, chunk,  # 64: one chunk;
                                          batch_tokens):  # L: one sequence per loop step
  q, k, v = _qkv(8, scale=scale)
  W = _W(16)
  g = jax.random.normal(jax.random.key(10), v.shape)

  def loss32(q, k, v):
    return jnp.sum(g * favor.favor_attention(q, k, v, W, kernel=kernel, causal=causal,
                                             chunk_size=chunk, span=span,
                                             batch_tokens=batch_tokens))
  grads = jax.grad(loss32, argnums=(0, 1, 2))(q, k, v)
  with jax.enable_x64(True):
    as64 = [jnp.asarray(np.asarray(x), jnp.float64) for x in (q, k, v, W, g)]
    def loss64(q, k, v):
      return jnp.sum(as64[4] * _naive_float64(q, k, v, as64[3], kernel, causal))
    expected = jax.grad(loss64, argnums=(0, 1, 2))(*as64[:3])
    expected = [np.asarray(e) for e in expected]
  for got, want in zip(grads, expected):
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_batch_groups_are_divisors_within_the_tokens():
  group = favor.attention._group  # pylint: disable=protected-access
  assert group(128, 64, 256) == 4 and group(6, 16, 64) == 3 and group(7, 16, 64) == 1
  assert group(8, 257, 256) == 8 and group(8, 16, 0) == 8 and group(2, 256, 256) == 1


@pytest.mark.parametrize("kernel, causal", [("positive", True), ("positive", False),
                                            ("gerf", False), ("relu", True)])
def test_batch_groups_change_nothing_but_rounding(kernel, causal):
  # Sequences read in groups (the CPU's loop over the batch) give every sequence what the whole
  # batch at once gives it, masks and per-sequence FAVOR++ parameters included.
  ks = jax.random.split(jax.random.key(21), 3)
  q, k, v = (jax.random.normal(kk, (6, 16, H, D)) for kk in ks)
  mask = jnp.arange(16)[None, :] < jnp.array([16, 9, 16, 3, 12, 16])[:, None]
  W, eps = _W(16), 1e-3 if kernel == "relu" else 0.0
  attend = lambda q, tokens: favor.favor_attention(  # one chunk or block: a loop only by group
      q, k, v, W, kernel=kernel, causal=causal, mask=mask, chunk_size=16, kernel_epsilon=eps,
      batch_tokens=tokens)
  whole, grad_whole = attend(q, 0), jax.grad(lambda q: jnp.sum(attend(q, 0) ** 2))(q)
  for tokens in (16, 32):  # 1 and 2 sequences per loop step
    np.testing.assert_allclose(attend(q, tokens), whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(jax.grad(lambda q: jnp.sum(attend(q, tokens) ** 2))(q),
                               grad_whole, rtol=1e-4, atol=1e-5 * np.abs(grad_whole).max())
  assert _loops(jax.make_jaxpr(lambda q: attend(q, 16))(q).jaxpr)
  assert not _loops(jax.make_jaxpr(lambda q: attend(q, 0))(q).jaxpr)


def test_the_platform_groups_a_batch_only_past_its_feature_bytes(monkeypatch):
  q, k, v = (jax.random.normal(kk, (6, 16, H, D)) for kk in jax.random.split(jax.random.key(3), 3))
  W = _W(16)
  features = 4 * 6 * 16 * H * 16  # float32 B L H M
  for limit, grouped in ((features, False), (features - 1, True)):
    monkeypatch.setitem(favor.attention.FORMS, jax.default_backend(),
                        favor.attention.Form(block=16, chunk=16, span=16, batch_tokens=32,
                                             batch_bytes=limit))
    attend = lambda q: favor.favor_attention(q, k, v, W, chunk_size=16)  # new: a new trace
    assert bool(_loops(jax.make_jaxpr(attend)(q).jaxpr)) == grouped, limit


def test_identical_under_jit_grad_and_vmap():
  q, k, v = _qkv(11)
  W = _W()
  fn = functools.partial(favor.favor_attention, causal=True, chunk_size=8)
  eager = fn(q, k, v, W)
  np.testing.assert_allclose(jax.jit(fn)(q, k, v, W), eager, rtol=1e-6, atol=1e-7)
  stacked = jnp.stack([q, q * 0.5])
  batched = jax.vmap(lambda qq: fn(qq, k, v, W))(stacked)
  np.testing.assert_allclose(batched[0], eager, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(batched[1], fn(q * 0.5, k, v, W), rtol=1e-6, atol=1e-7)
  loss = lambda q: jnp.sum(fn(q, k, v, W) ** 2)
  grad = jax.grad(loss)(q)
  np.testing.assert_allclose(jax.jit(jax.grad(loss))(q), grad, rtol=1e-5,
                             atol=1e-5 * np.abs(grad).max())


def _loops(jaxpr):
  """The loop primitives (scan, while) of a jaxpr and its inner jaxprs, conds' branches left
  out (the exact path runs only where a key outgrows its reference)."""
  return [e.primitive.name for e in _eqns(jaxpr, skip=("cond",))
          if e.primitive.name in ("scan", "while")]


@pytest.mark.parametrize("causal", [False, True])
def test_one_block_or_span_runs_without_a_loop_and_bf16_products(causal):
  # The accelerator form: the whole sequence at once, in both passes; bf16 product operands
  # with float32 results (sums, states and normalisers stay float32).
  q, k, v = _qkv(13, length=64, dtype=jnp.bfloat16)
  W = _W()
  attend = lambda q, k, v: favor.favor_attention(q, k, v, W, causal=causal, chunk_size=(
      8 if causal else 64), span=64)
  for f in (attend, jax.grad(lambda q, k, v: jnp.sum(attend(q, k, v).astype(jnp.float32)),
                             argnums=(0, 1, 2))):
    jaxpr = jax.make_jaxpr(f)(q, k, v).jaxpr
    assert _loops(jaxpr) == []
  dots = [e for e in _eqns(jax.make_jaxpr(attend)(q, k, v).jaxpr)
          if e.primitive.name == "dot_general"]
  low = [e for e in dots if e.invars[0].aval.dtype == jnp.bfloat16 == e.invars[1].aval.dtype]
  # K'^T V and Q' (K'^T V); causal: each chunk's state, Q' K'^T, scores V and Q' S.
  assert len(low) == (4 if causal else 2), dots
  assert all(e.outvars[0].aval.dtype == jnp.float32 for e in low)
  looped = jax.make_jaxpr(lambda q, k, v: favor.favor_attention(
      q, k, v, W, causal=causal, chunk_size=8, span=8))(q, k, v).jaxpr
  assert _loops(looped)  # the sequential form, for contrast


def _eqns(jaxpr, skip=()):
  """Every equation of a jaxpr and of its inner jaxprs, but those of primitives in `skip`."""
  out = []
  for eqn in jaxpr.eqns:
    out.append(eqn)
    if eqn.primitive.name in skip:
      continue
    for param in eqn.params.values():
      for inner in param if isinstance(param, (tuple, list)) else (param,):
        inner = getattr(inner, "jaxpr", inner)
        if hasattr(inner, "eqns"):
          out += _eqns(inner, skip)
  return out


def test_causal_never_builds_quadratic_or_lmd_tensors(largest_intermediate):
  length, chunk, m, dv = 512, 16, 24, 8
  q = jnp.zeros((1, length, 1, D))
  v = jnp.zeros((1, length, 1, dv))
  W = favor.projection(jax.random.key(0), m, D)
  fn = lambda q, k, v: favor.favor_attention(q, k, v, W, causal=True, chunk_size=chunk)
  for f in (fn, jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))):
    largest = largest_intermediate(f, q, q, v)
    # O(L (m + d)) is fine; L x L = 262144 or L x m x dv = 98304 is not.
    assert largest <= length * (m + D + dv), largest


def test_bad_arguments_raise():
  q, k, v = _qkv()
  W = _W()
  with pytest.raises(ValueError, match="unknown kernel"):
    favor.favor_attention(q, k, v, W, kernel="softmax")
  with pytest.raises(ValueError, match="needs a projection"):
    favor.favor_attention(q, k, v, None)
  with pytest.raises(ValueError, match="chunk_size"):
    favor.favor_attention(q, k, v, W, causal=True, chunk_size=0)
  with pytest.raises(ValueError, match="Lq == Lk"):
    favor.favor_attention(q[:, :5], k, v, W, causal=True)
  with pytest.raises(ValueError, match="mask must be"):
    favor.favor_attention(q, k, v, W, mask=jnp.ones((B, L + 1), bool))
  with pytest.raises(ValueError, match="batch, length, heads"):
    favor.softmax_attention(q[0], k, v)
  with pytest.raises(ValueError, match="Python int"):
    favor.favor_attention(q, k, v, W, chunk_size=jnp.int32(8))
  with pytest.raises(ValueError, match="batch_tokens must be a Python int >= 0"):
    favor.favor_attention(q, k, v, W, batch_tokens=-1)
  with pytest.raises(ValueError, match="span must be a Python int >= 1"):
    favor.favor_attention(q, k, v, W, causal=True, span=0)


def test_scale_and_kernel_epsilon_may_be_arrays_and_traced():
  q, k, v = _qkv(12)
  W = _W()
  expected = favor.favor_attention(q, k, v, W, scale=0.5)
  np.testing.assert_array_equal(favor.favor_attention(q, k, v, W, scale=jnp.float32(0.5)),
                                expected)
  traced = jax.jit(lambda s: favor.favor_attention(q, k, v, W, causal=True, scale=s))
  np.testing.assert_allclose(traced(jnp.float32(0.5)),
                             favor.favor_attention(q, k, v, W, causal=True, scale=0.5),
                             rtol=1e-6, atol=1e-6)
  relu = jax.jit(lambda eps: favor.favor_attention(q, k, v, W, kernel="relu", kernel_epsilon=eps))
  np.testing.assert_allclose(relu(jnp.float32(1e-3)), _explicit(q, k, v, W, "relu", 1e-3, False),
                             rtol=2e-5, atol=2e-5)


def test_integer_inputs_are_refused_by_name_even_under_jit():
  q, k, v = _qkv(3)
  W = _W()
  # Today's int v would come back as an int output: [-1, 0, 0, 0] where float v gives -1.73, ...
  for args, name in (((q, k, v.astype(jnp.int32)), "v"), ((q.astype(jnp.int8), k, v), "q"),
                     ((q, k.astype(jnp.uint32), v), "k")):
    dtype = args[("q", "k", "v").index(name)].dtype
    message = f"{name} has dtype {dtype}; attention needs floating-point q, k and v"
    for causal in (False, True):
      with pytest.raises(ValueError, match=f"^{message}$"):
        favor.favor_attention(*args, W, causal=causal)
    with pytest.raises(ValueError, match=f"^{message}"):  # jax appends a note under jit
      jax.jit(favor.favor_attention)(*args, W)
    with pytest.raises(ValueError, match=f"^{message}$"):
      favor.softmax_attention(*args)
  cache = favor.causal_decode_init(B, H, M, D)
  with pytest.raises(ValueError, match="^v has dtype int32"):
    favor.causal_decode_step(cache, q[:, 0], k[:, 0], v[:, 0].astype(jnp.int32), W)
  # Every float dtype still passes, its output in v's dtype.
  assert favor.favor_attention(q, k, v.astype(jnp.bfloat16), W).dtype == jnp.bfloat16


def test_a_mask_must_be_bool():
  q, k, v = _qkv(4)
  W = _W()
  half = jnp.ones((B, L)) * 0.5  # read as "keep" everywhere until now
  message = re.escape("mask has dtype float32; it must be bool (True = real token)")
  calls = [lambda m: favor.favor_attention(q, k, v, W, mask=m),
           lambda m: favor.favor_attention(q, k, v, W, mask=m, causal=True),
           lambda m: favor.softmax_attention(q, k, v, mask=m),
           lambda m: favor.softmax_matrix(q, k, mask=m),
           lambda m: favor.attention_matrix(q, k, W, mask=m),
           lambda m: favor.exponential.moments(k, m)]
  for call in calls:
    with pytest.raises(ValueError, match=f"^{message}$"):
      call(half)
    with pytest.raises(ValueError, match="^mask has dtype int32"):
      jax.jit(call)(half.astype(jnp.int32))
  keep = np.arange(L) < 30
  np.testing.assert_array_equal(calls[0](jnp.broadcast_to(keep, (B, L))),
                                calls[0](np.broadcast_to(keep, (B, L))))  # numpy bool too


def test_no_random_features_say_m_must_be_at_least_one():
  q, k, v = _qkv(5)
  with pytest.raises(ValueError, match=re.escape("FAVOR needs m >= 1 random features, got W of "
                                                 "shape (0, 8)")):
    favor.favor_attention(q, k, v, jnp.zeros((0, D)))
  with pytest.raises(ValueError, match="needs m >= 1"):
    favor.feature_map(q, jnp.zeros((0, D)), "relu")


def test_empty_sequences_name_their_length():
  q, k, v = _qkv(6)
  W = _W()
  for causal in (False, True):
    with pytest.raises(ValueError, match="^q, k, v have length L = 0; need L >= 1$"):
      favor.favor_attention(q[:, :0], k[:, :0], v[:, :0], W, causal=causal)
  with pytest.raises(ValueError, match=re.escape("k, v have length Lk = 0; need Lk >= 1 (q: Lq "
                                                 f"= {L})")):
    favor.favor_attention(q, k[:, :0], v[:, :0], W)
  with pytest.raises(ValueError, match=re.escape("q has length Lq = 0; need Lq >= 1 (k, v: Lk = "
                                                 f"{L})")):
    favor.favor_attention(q[:, :0], k, v, W)
  with pytest.raises(ValueError, match="^q and k have head_dim d = 0; need d >= 1$"):
    favor.favor_attention(q[..., :0], k[..., :0], v, None, kernel="relu")
  with pytest.raises(ValueError, match="length L = 0"):
    favor.softmax_attention(q[:, :0], k[:, :0], v[:, :0])


@pytest.mark.parametrize("causal", [False, True])
def test_nan_or_inf_inputs_are_named_eagerly_and_give_nan_under_jit(causal):
  q, k, v = _qkv(7)
  W = _W()
  attend = functools.partial(favor.favor_attention, W=W, causal=causal)
  with pytest.raises(ValueError, match=r"^q contains NaN or Inf$"):
    attend(q.at[1, 3, 2, 0].set(jnp.nan), k, v)
  with pytest.raises(ValueError, match=re.escape("k contains NaN or Inf (in a key the mask "
                                                 "keeps)")):
    attend(q, k.at[0, 5, 1, 4].set(jnp.inf), v)
  bad = k.at[0, 20, 1, 4].set(jnp.nan)
  # A padded key is never read, NaN or not.
  mask = jnp.ones((B, L), bool).at[0, 20].set(False)
  np.testing.assert_array_equal(attend(q, bad, v, mask=mask),
                                attend(q, k, v, mask=mask))
  # Traced values cannot be checked: NaN out, from position 20 on when causal (documented).
  out = np.asarray(jax.jit(attend)(q, bad, v))
  np.testing.assert_array_equal(np.isnan(out[0]).any(axis=(1, 2)),
                                np.arange(L) >= (20 if causal else 0))
  assert np.isfinite(out[1]).all()
