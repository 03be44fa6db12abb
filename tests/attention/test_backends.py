"""Every registered attention backend: shape, dtype, causality, padding; plus per-backend facts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer import attention, favor
from performer.attention import redraw
from performer.attention.registry import RandomFeatures
from testlib import qkv

B, L, H, D = 2, 29, 3, 8
OPTIONS = {"performer_softmax": {"num_features": 64, "chunk_size": 8},
           "performer_relu": {"num_features": 64, "chunk_size": 8}, "linear": {"chunk_size": 8},
           "performer_favorpp": {"num_features": 64, "chunk_size": 8},
           "performer_favorsharp": {"num_features": 64, "chunk_size": 8},
           "linformer": {"num_projections": 16}, "exact_blockwise": {"block": 8},
           "reformer": {"chunk_size": 4, "n_buckets": 4}}


def _make(name, **extra):
  return attention.make(name, num_heads=H, head_dim=D, max_len=64, rngs=nnx.Rngs(0),
                        **{**OPTIONS.get(name, {}), **extra})


def _qkv(seed=0, length=L, dtype=jnp.float32):
  return qkv((B, length, H, D), seed, dtype=dtype)


def _causal_names():
  return [n for n in attention.names() if attention.info(n).causal]


@pytest.mark.parametrize("name", attention.names())
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_shape_dtype_and_finite(name, dtype):
  q, k, v = _qkv(dtype=dtype)
  for causal in (False, True) if name in _causal_names() else (False,):
    out = _make(name)(q, k, v, causal=causal)
    assert out.shape == (B, L, H, D) and out.dtype == dtype
    assert np.isfinite(np.asarray(out, np.float32)).all()


@pytest.mark.parametrize("name", _causal_names())
def test_causal_outputs_ignore_future_tokens(name):
  module = _make(name)
  module(*_qkv(9), causal=True)  # state of other batches (FAVOR++'s running moments) ...
  module.eval()  # ... held fixed, as in evaluation
  q, k, v = _qkv(1)
  base = module(q, k, v, causal=True)
  for i in (0, 9, 27):
    bump = jax.random.normal(jax.random.key(i), (3, B, L - i - 1, H, D)) * 5
    q2, k2, v2 = (x.at[:, i + 1:].add(b) for x, b in zip((q, k, v), bump))
    out = module(q2, k2, v2, causal=True)
    if name == "reformer":  # the same keys are visible; their order in a sum can change by an ulp
      np.testing.assert_allclose(out[:, :i + 1], base[:, :i + 1], rtol=1e-6, atol=1e-6)
    else:
      np.testing.assert_array_equal(out[:, :i + 1], base[:, :i + 1])


@pytest.mark.parametrize("name", attention.names())
def test_padding_leaves_real_positions_unchanged(name):
  module = _make(name)
  q, k, v = _qkv(2)
  real = 19
  alone = module(q[:, :real], k[:, :real], v[:, :real])
  mask = jnp.broadcast_to(jnp.arange(L) < real, (B, L))
  garbage = lambda x: x.at[:, real:].set(30.0)
  padded = module(q, garbage(k), garbage(v), mask=mask)
  np.testing.assert_allclose(padded[:, :real], alone, rtol=1e-5, atol=1e-5)


def test_performer_softmax_approaches_exact_at_large_m():
  q, k, v = (0.5 * x for x in _qkv(3))
  for causal in (False, True):
    exact = favor.softmax_attention(q, k, v, causal=causal)
    err = {m: float(jnp.mean((_make("performer_softmax", num_features=m)(q, k, v, causal=causal)
                              - exact) ** 2)) for m in (16, 4096)}
    assert err[4096] < 1e-4 and err[4096] * 20 < err[16], err


def test_linformer_refuses_causal():
  q, k, v = _qkv()
  with pytest.raises(ValueError, match="cannot be causal"):
    _make("linformer")(q, k, v, causal=True)


def test_random_features_redraw_by_period_and_are_not_params():
  module = _make("performer_softmax", redraw_every=10, seed=3)
  w0 = np.asarray(module.W[...])
  redraw(module, 9)
  np.testing.assert_array_equal(module.W[...], w0)  # same period
  redraw(module, 10)
  w1 = np.asarray(module.W[...])
  assert np.abs(w1 - w0).max() > 0.1
  redraw(module, 19)
  np.testing.assert_array_equal(module.W[...], w1)
  other_layer = attention.make("performer_softmax", num_heads=H, head_dim=D, max_len=64,
                               rngs=nnx.Rngs(0), layer=1, num_features=64, seed=3)
  assert np.abs(np.asarray(other_layer.W[...]) - w0).max() > 0.1
  assert not jax.tree.leaves(nnx.state(module, nnx.Param))  # the optimizer never sees W
  assert jax.tree.leaves(nnx.state(module, RandomFeatures))
  # Under jit with a traced step (as in training): the same matrix on every
  # retrace; equal to the eager draw up to float rounding of the QR.
  graph, state = nnx.split(module)
  def at(state, step):
    m = nnx.merge(graph, state)
    m.redraw(step)
    return m.W[...]
  first = jax.jit(at)(state, jnp.int32(10))
  np.testing.assert_array_equal(jax.jit(at)(state, jnp.int32(15)), first)
  np.testing.assert_allclose(first, w1, atol=1e-6)
  never = _make("performer_relu", redraw_every=0)
  w = np.asarray(never.W[...])
  redraw(never, 12345)
  np.testing.assert_array_equal(never.W[...], w)


def test_deterministic_relu_features_are_the_closed_form_and_never_redrawn():
  # The released code's generalized attention without W: phi(x) = relu(x / d^(1/4)) + eps.
  q, k, v = _qkv(4)
  module = _make("performer_relu", features="deterministic", chunk_size=None)
  redraw(module, 7)
  eps = 1e-3
  phi_q, phi_k = (jax.nn.relu(x / D ** 0.25) + eps for x in (q, k))
  scores = jnp.einsum("blhm,bshm->bhls", phi_q, phi_k)
  for causal in (False, True):
    s = jnp.where(jnp.tril(jnp.ones((L, L), bool)), scores, 0.0) if causal else scores
    expected = jnp.einsum("bhls,bshd->blhd", s, v) / s.sum(-1).transpose(0, 2, 1)[..., None]
    np.testing.assert_allclose(module(q, k, v, causal=causal), expected, rtol=2e-5, atol=2e-6)
  with pytest.raises(ValueError, match="needs random features"):
    _make("performer_softmax", features="deterministic")
  with pytest.raises(ValueError, match="features must be"):
    _make("performer_relu", features="fixed")


def test_taylor_features_give_based_closed_form_attention_and_decode_alike():
  # Based (arXiv 2402.18668): weights 1 + q.k / sqrt(d) + (q.k)^2 / (2d) on unscaled q and k.
  q, k, v = _qkv(5)
  module = _make("performer_relu", kernel="taylor", features="deterministic", chunk_size=4)
  qk = jnp.einsum("blhd,bshd->bhls", q, k)
  scores = 1 + qk / np.sqrt(D) + qk ** 2 / (2 * D)
  for causal in (False, True):
    s = jnp.where(jnp.tril(jnp.ones((L, L), bool)), scores, 0.0) if causal else scores
    expected = jnp.einsum("bhls,bshd->blhd", s, v) / s.sum(-1).transpose(0, 2, 1)[..., None]
    np.testing.assert_allclose(module(q, k, v, causal=causal), expected, rtol=1e-4, atol=1e-5)
  phi = favor.feature_map(q[0, 0, 0], None, "taylor")
  assert phi.shape == (1 + D + D * D,)
  cache = module.decode_init(B, H, D)
  for t in range(3):
    cache, out = module.decode_step(cache, q[:, t], k[:, t], v[:, t])
  s = scores[..., 2, :3]  # [B, H, 3]: the third query's weights on the first three keys
  np.testing.assert_allclose(out, jnp.einsum("bhs,bshd->bhd", s, v[:, :3]) / s.sum(-1)[..., None],
                             rtol=1e-4, atol=1e-5)
  # Based's feature_dim r: q and k through a learned d -> r map first, then the r-dim closed form.
  small = _make("performer_relu", kernel="taylor", features="deterministic", feature_dim=3)
  w = small.qk_map.kernel[...]
  qk = jnp.einsum("blhd,bshd->bhls", q @ w, k @ w)
  scores = jnp.tril(1 + qk / np.sqrt(3) + qk ** 2 / 6)
  expected = jnp.einsum("bhls,bshd->blhd", scores, v) / scores.sum(-1).transpose(0, 2, 1)[..., None]
  np.testing.assert_allclose(small(q, k, v, causal=True), expected, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="has no random features"):
    _make("performer_relu", kernel="taylor")
  with pytest.raises(ValueError, match="feature_dim must be"):
    _make("performer_relu", feature_dim=0)
  with pytest.raises(ValueError, match="takes no projection W"):
    favor.feature_map(q, jnp.ones((4, D)), "taylor")


def test_unknown_names_and_options():
  with pytest.raises(ValueError, match="unknown attention 'softmax'; choose from exact"):
    attention.make("softmax", num_heads=H, head_dim=D, max_len=8, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError,
                     match="has no option num_feature; its options: batch_tokens, chunk_size"):
    _make("performer_softmax", num_feature=3)
  with pytest.raises(ValueError, match="its options: none"):
    _make("exact", chunk_size=3)


def test_the_registry_says_what_each_backend_can_do_and_its_resolved_defaults():
  facts = {n: attention.info(n) for n in attention.names()}
  assert {n: i.label for n, i in facts.items()} == {
      "exact": "Transformer", "exact_blockwise": "Transformer (blockwise)",
      "exact_dot_product": "Transformer (jax.nn.dot_product_attention)",
      "identity": "Identity", "linear": "Linear", "linformer": "Linformer",
      "performer_favorpp": "Performer-FAVOR++", "performer_favorsharp": "Performer-FAVOR#",
      "performer_relu": "Performer-ReLU", "performer_softmax": "Performer-softmax",
      "reformer": "Reformer"}
  assert [n for n, i in facts.items() if not i.causal] == ["linformer"]
  performers = ["performer_favorpp", "performer_favorsharp", "performer_relu", "performer_softmax"]
  assert [n for n, i in facts.items() if i.decoding] == ["linear", *performers]
  assert [n for n, i in facts.items() if i.random_state] == ["linformer", *performers, "reformer"]
  assert (facts["performer_favorpp"].defaults["kernel"],
          facts["performer_favorsharp"].defaults["kernel"]) == ("gerf", "saderf")
  softmax, relu = facts["performer_softmax"].defaults, facts["performer_relu"].defaults
  assert (softmax["kernel"], softmax["kernel_epsilon"], relu["kernel"], relu["kernel_epsilon"]) == \
      ("positive", 0.0, "relu", 1e-3)  # A.3, A.4
  assert softmax["num_features"] == relu["num_features"] == 256
  # a new W every step, as the released code (performer.py says why)
  assert softmax["redraw_every"] == 1 and softmax["projection"] == "orthogonal"
  assert softmax["features"] == relu["features"] == "random"
  # what a built layer holds is what the registry says
  layer = attention.make("performer_relu", num_heads=2, head_dim=8, max_len=16,
                         rngs=nnx.Rngs(0), num_features=4)
  assert (layer.kernel, layer.kernel_epsilon, layer.redraw_every) == (
      relu["kernel"], relu["kernel_epsilon"], relu["redraw_every"])
  assert attention.options("performer_softmax", {"kernel": "trig"})["kernel"] == "trig"
  with pytest.raises(ValueError, match="unknown attention 'nope'; choose from exact"):
    attention.info("nope")


@pytest.mark.parametrize("name", ["performer_favorpp", "performer_favorsharp"])
def test_causal_data_dependent_layers_attend_with_earlier_batches_moments(name):
  layer = _make(name)
  q, k, v = _qkv(3)
  W = layer.matrix()
  kernel = layer.kernel
  # Zero moments at first: the kernel is FAVOR+ itself.
  first = layer(q, k, v, causal=True)
  np.testing.assert_allclose(first, favor.favor_attention(q, k, v, W, causal=True, chunk_size=8),
                             rtol=1e-5, atol=1e-6)
  # The call recorded its batch (every real token, per head), bias-corrected.
  mean = lambda x: jnp.mean((x * D ** -0.25).reshape(-1, H, D), axis=0)
  np.testing.assert_allclose(layer.statistics()[0].mean, mean(q), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(layer.statistics()[1].second, jnp.einsum(
      "nhd,nhe->hde", *(2 * ((k * D ** -0.25).reshape(-1, H, D),))) / (B * L), rtol=1e-5,
      atol=1e-6)
  # The next batch attends with those moments, not its own, then adds its own.
  q2, k2, v2 = _qkv(4)
  before = layer.statistics()
  out = layer(q2, k2, v2, causal=True)
  np.testing.assert_allclose(out, favor.favor_attention(q2, k2, v2, W, kernel=kernel, causal=True,
                                                        chunk_size=8, statistics=before),
                             rtol=1e-5, atol=1e-6)
  assert not np.allclose(layer.statistics()[0].mean, before[0].mean)
  # Evaluation keeps them fixed; bidirectional calls use the sequence's own and record nothing.
  layer.eval()
  fixed = layer.statistics()
  layer(q, k, v, causal=True)
  layer.train()
  layer(q, k, v, causal=False)
  for got, want in zip(jax.tree.leaves(layer.statistics()), jax.tree.leaves(fixed)):
    np.testing.assert_array_equal(got, want)
  assert "moments" in nnx.state(layer) and "moments" not in nnx.state(layer, nnx.Param)


def test_decoding_a_data_dependent_layer_equals_its_causal_pass():
  layer = _make("performer_favorpp")
  q, k, v = _qkv(5)
  layer(*_qkv(6), causal=True)  # some running moments
  layer.eval()
  expected = layer(q, k, v, causal=True)
  cache = layer.decode_init(B, H, D)
  for t in range(L):
    cache, out = layer.decode_step(cache, q[:, t], k[:, t], v[:, t])
    np.testing.assert_allclose(out, expected[:, t], rtol=1e-4, atol=1e-5)


def test_every_backend_has_its_own_label_and_colour_and_is_found_by_its_label():
  facts = [attention.info(n) for n in attention.names()]
  assert len({i.label for i in facts}) == len({i.colour for i in facts}) == len(facts)
  assert all(attention.by_label(i.label) == i.name for i in facts)
  with pytest.raises(ValueError, match="no attention backend is labelled"):
    attention.by_label("Performer")
  assert [attention.colour(i.name) for i in facts] == [i.colour for i in facts]
  assert attention.colour("performer_pytorch", "m") == "m"  # a curve that is not a backend


@pytest.mark.parametrize("name, extra", [
    ("linear", {}), ("performer_softmax", {"num_features": 8}),
    ("performer_softmax", {"num_features": 8, "kernel": "trig"}),
    ("performer_favorpp", {"num_features": 8}),
    ("performer_relu", {"features": "deterministic"}),
    ("performer_relu", {"kernel": "taylor", "features": "deterministic", "feature_dim": 3}),
    ("performer_relu", {"num_features": 8, "kernel": "hyperbolic", "feature_dim": 5})])
def test_the_declared_state_size_is_that_of_the_decoding_state(name, extra):
  state, _, _ = _make(name, **extra).decode_init(1, 1, 2 * D)  # S: [B, H, M, dv], dv = 2 d_k
  options = attention.options(name, {**OPTIONS.get(name, {}), **extra})
  assert attention.info(name).state_size(options, L, D, 2 * D) == state.shape[2] * state.shape[3]


def test_a_kv_cache_holds_l_by_dk_plus_dv_and_identity_nothing():
  for name in ("exact", "reformer"):
    assert attention.info(name).state_size({}, L, D, 2 * D) == L * 3 * D
  assert attention.info("identity").state_size({}, L, D, D) == 0
  assert attention.info("linformer").state_size is None


@pytest.mark.parametrize("name", attention.names())
def test_every_backend_refuses_integer_inputs_non_bool_masks_and_empty_sequences(name):
  module = _make(name)
  q, k, v = _qkv(4)
  # Until now: int32 outputs, and most read a 0.5 mask as "keep".
  with pytest.raises(ValueError, match="^v has dtype int32; attention needs floating-point q, k "
                                       "and v$"):
    module(q, k, v.astype(jnp.int32))
  with pytest.raises(ValueError, match="^q has dtype int32"):
    module(q.astype(jnp.int32), k, v)
  with pytest.raises(ValueError, match=r"^mask has dtype float32; it must be bool \(True = real "
                                       r"token\)$"):
    module(q, k, v, mask=jnp.ones((B, L)) * 0.5)
  with pytest.raises(ValueError, match="^q, k, v have length L = 0; need L >= 1$"):
    module(q[:, :0], k[:, :0], v[:, :0])
  with pytest.raises(ValueError, match="^mask has dtype float32"):  # static: checked under jit
    jax.jit(lambda mask: module(q, k, v, mask=mask))(jnp.ones((B, L)))
