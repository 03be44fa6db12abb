"""Zoology's recall model: the gated short convolution, q/k of their own width, tied head, no
position embeddings."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer.models.config import ModelConfig
from performer.models.short_conv import ShortConv
from performer.models.transformer import TransformerLM


def _zoology(**overrides):
  kw = dict(vocab_size=40, max_len=16, num_layers=1, num_heads=1, d_model=16, d_ff=0,
            dropout=0.0, attention="performer_softmax", attention_options={"num_features": 32},
            causal=True, conv_kernel=3, qk_dim=8, position_embeddings=False, tie_embeddings=True)
  return ModelConfig(**(kw | overrides))


def test_short_conv_is_the_gated_depthwise_sum_over_the_last_k_positions():
  conv = ShortConv(5, 3, rngs=nnx.Rngs(0))
  x = np.asarray(jax.random.normal(jax.random.key(1), (2, 7, 5)))
  w = np.asarray(conv.kernel[...])  # [K, D]: tap j reads position t - (K-1) + j
  b = np.asarray(conv.bias[...]) + 0.3  # not its initial zeros
  conv.bias[...] = jnp.asarray(b)
  gate = x @ np.asarray(conv.gate.kernel[...]) + np.asarray(conv.gate.bias[...])
  padded = np.concatenate([np.zeros((2, 2, 5)), x], axis=1)
  # The same as a depthwise convolution by jax.lax (feature groups = D), causally padded.
  lax_conv = jax.lax.conv_general_dilated(
      jnp.asarray(x), jnp.asarray(w)[:, None, :], (1,), [(2, 0)], feature_group_count=5,
      dimension_numbers=("NWC", "WIO", "NWC"))
  expected = np.stack([(padded[:, t:t + 3] * w).sum(1) + b for t in range(7)], 1) * gate
  np.testing.assert_allclose((np.asarray(lax_conv) + b) * gate, expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(conv(jnp.asarray(x)), expected, rtol=1e-5, atol=1e-5)
  # Causal: changing position 4 changes no output before it.
  y = x.copy()
  y[:, 4] += 1.0
  changed = np.abs(np.asarray(conv(jnp.asarray(y)) - conv(jnp.asarray(x)))).max(axis=(0, 2))
  assert np.all(changed[:4] == 0) and np.all(changed[4:7] > 0)


def test_short_conv_decode_steps_equal_the_full_call():
  conv = ShortConv(4, 3, rngs=nnx.Rngs(2))
  x = jax.random.normal(jax.random.key(3), (2, 6, 4))
  cache, outs = conv.decode_init(2, 4), []
  for t in range(6):
    cache, y = conv.decode_step(cache, x[:, t])
    outs.append(y)
  np.testing.assert_allclose(jnp.stack(outs, 1), conv(x), rtol=1e-5, atol=1e-6)


def test_the_recall_model_is_causal_tied_and_has_no_position_embeddings():
  model = TransformerLM(_zoology(), rngs=nnx.Rngs(0))
  assert model.pos is None and model.head is None
  block = model.blocks[0]
  assert block.qkv.kernel[...].shape == (16, 8 + 8 + 16)  # q, k of qk_dim 8; v of head_dim 16
  tokens = jax.random.randint(jax.random.key(1), (2, 12), 1, 40)
  logits = model(tokens)
  # Tied: the output layer is the embedding's transpose.
  hidden = model.hidden_states(tokens)[-1]
  np.testing.assert_allclose(logits, model.ln(hidden) @ model.embed.embedding[...].T, rtol=1e-5,
                             atol=1e-5)
  # Causal, and a token before t reaches the logits at t (through the convolution or attention).
  later = tokens.at[:, 8:].set((tokens[:, 8:] + 1) % 39 + 1)
  np.testing.assert_array_equal(model(later)[:, :8], logits[:, :8])
  earlier = tokens.at[:, 3].set(tokens[:, 3] % 39 + 1)
  assert float(jnp.abs(model(earlier)[:, 4] - logits[:, 4]).max()) > 0


@pytest.mark.parametrize("attention", ["performer_softmax", "linear", "performer_relu"])
def test_the_recall_model_decodes_what_its_full_pass_gives(attention):
  options = {"num_features": 32} if attention != "linear" else {}
  model = TransformerLM(_zoology(attention=attention, attention_options=options, num_layers=2,
                                 position_embeddings=True, tie_embeddings=False),
                        rngs=nnx.Rngs(4))
  model.eval()
  tokens = jax.random.randint(jax.random.key(5), (2, 10), 1, 40)
  caches, outs = model.decode_init(2), []
  for t in range(10):
    logits, caches = model.decode_step(tokens[:, t], t, caches)
    outs.append(logits)
  np.testing.assert_allclose(jnp.stack(outs, 1), model(tokens), rtol=1e-4, atol=1e-4)


def test_the_convolution_only_sees_the_past_even_with_exact_attention_and_masks():
  model = TransformerLM(_zoology(attention="exact", attention_options={}), rngs=nnx.Rngs(6))
  tokens = jax.random.randint(jax.random.key(7), (1, 10), 1, 40)
  mask = jnp.ones((1, 10), bool)
  base = model(tokens, mask)
  for t in range(1, 10):
    changed = model(tokens.at[:, t].set(tokens[:, t] % 39 + 1), mask)
    np.testing.assert_array_equal(changed[:, :t], base[:, :t])


@pytest.mark.parametrize("overrides, match", [
    (dict(conv_kernel=-1), "conv_kernel must be >= 0"),
    (dict(qk_dim=-2), "qk_dim must be >= 0"),
    (dict(reversible=True), "reversible layers have no short convolution"),
])
def test_bad_recall_model_settings_are_refused(overrides, match):
  with pytest.raises(ValueError, match=match):
    _zoology(**overrides)
