"""Incremental decoding of causal FAVOR models equals the full forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer import favor
from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM


@pytest.mark.parametrize("kernel, eps", [("positive", 0.0), ("relu", 1e-3), ("trig", 0.0),
                                         ("hyperbolic", 0.0)])
def test_decode_step_equals_causal_attention(kernel, eps):
  ks = jax.random.split(jax.random.key(0), 3)
  q, k, v = (jax.random.normal(kk, (2, 19, 3, 8)) * 0.7 for kk in ks)
  W = favor.projection(jax.random.key(1), 16, 8)
  full = favor.favor_attention(q, k, v, W, kernel=kernel, causal=True, chunk_size=4,
                               kernel_epsilon=eps)
  state = favor.causal_decode_init(2, 3, favor.feature_map(q[:, 0], W, kernel).shape[-1], 8)
  outs = []
  for t in range(19):
    state, out = favor.causal_decode_step(state, q[:, t], k[:, t], v[:, t], W, kernel=kernel,
                                          kernel_epsilon=eps)
    outs.append(out)
  np.testing.assert_allclose(jnp.stack(outs, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attention", ["performer_softmax", "performer_relu", "linear",
                                       "performer_favorsharp"])
def test_greedy_generation_matches_the_full_forward_pass(attention):
  options = {"num_features": 16} if attention.startswith("performer") else {}
  cfg = ModelConfig(vocab_size=28, max_len=32, num_layers=2, num_heads=2, d_model=32, d_ff=64,
                    attention=attention, attention_options=options, causal=True)
  model = TransformerLM(cfg, rngs=nnx.Rngs(3))
  model(jnp.array([[1, 3, 4, 8, 2, 6]], jnp.int32))  # in training: FAVOR#'s running moments
  model.eval()
  tokens = jnp.array([[1, 5, 9, 12], [1, 7, 7, 20]], jnp.int32)  # prompts
  caches = model.decode_init(2)
  step = nnx.jit(lambda m, t, p, c: m.decode_step(t, p, c))
  decoded = []
  for position in range(20):
    if position >= tokens.shape[1]:  # generate greedily
      tokens = jnp.concatenate([tokens, jnp.argmax(decoded[-1], -1)[:, None]], axis=1)
    logits, caches = step(model, tokens[:, position], jnp.int32(position), caches)
    decoded.append(logits)
  # The model is causal: one full pass over the final sequence gives every step's logits.
  full = model(tokens[:, :20])
  np.testing.assert_allclose(jnp.stack(decoded, 1), full, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal(tokens[:, 4:], jnp.argmax(full, -1)[:, 3:19])


def test_decoding_needs_a_causal_decodable_model():
  for kwargs, match in ((dict(attention="exact"), "no incremental decoder"),
                        (dict(attention="performer_relu", causal=False), "causal")):
    cfg = ModelConfig(vocab_size=28, max_len=8, num_layers=1, num_heads=2, d_model=8, d_ff=8,
                      attention_options={"num_features": 4} if "performer" in kwargs["attention"]
                      else {}, **kwargs)
    with pytest.raises(ValueError, match=match):
      TransformerLM(cfg, rngs=nnx.Rngs(0)).decode_init(1)


def test_a_position_past_max_len_is_an_error_not_nan_logits():
  cfg = ModelConfig(vocab_size=28, max_len=8, num_layers=1, num_heads=2, d_model=8, d_ff=8,
                    attention="performer_relu", attention_options={"num_features": 4}, causal=True)
  model = TransformerLM(cfg, rngs=nnx.Rngs(0))
  caches = model.decode_init(1)
  logits, caches = model.decode_step(jnp.array([1]), 7, caches)  # the last position is fine
  assert bool(jnp.all(jnp.isfinite(logits)))
  for position in (8, jnp.int32(9), -1):
    with pytest.raises(ValueError, match=r"position \S+ is outside the model's positions 0 .. 7"):
      model.decode_step(jnp.array([1]), position, caches)
  # Under jit the position is traced: the documented NaN.
  step = nnx.jit(lambda m, t, p, c: m.decode_step(t, p, c))
  assert bool(jnp.all(jnp.isnan(step(model, jnp.array([1]), jnp.int32(8), caches)[0])))
