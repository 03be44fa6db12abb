"""Reversible layers: the custom backward equals autodiff of the same math, dropout included."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM


def _model(attention, dropout, causal=True):
  options = {"reformer": {"chunk_size": 4, "n_buckets": 4},
             "performer_softmax": {"num_features": 8}}.get(attention, {})
  cfg = ModelConfig(vocab_size=28, max_len=32, num_layers=3, num_heads=2, d_model=16, d_ff=32,
                    dropout=dropout, attention=attention, attention_options=options,
                    causal=causal, reversible=True)
  return TransformerLM(cfg, rngs=nnx.Rngs(0))


def _plain(model, tokens):
  """The same reversible network, written out and differentiated by plain autodiff."""
  x = model.dropout(model.embed(tokens) + model.pos(jnp.arange(tokens.shape[1]))[None])
  key = model.rngs.dropout()  # drawn after the embedding dropout, as the model does
  x1 = x2 = x
  for i, block in enumerate(model.blocks):
    x1 = x1 + block.attention_part(x2, None, jax.random.fold_in(key, 2 * i))
    x2 = x2 + block.mlp_part(x1, jax.random.fold_in(key, 2 * i + 1))
  return model.head(model.ln((x1 + x2) / 2))


@pytest.mark.parametrize("attention, dropout", [("reformer", 0.0), ("reformer", 0.3),
                                                ("performer_softmax", 0.3)])
def test_custom_backward_equals_autodiff(attention, dropout):
  model = _model(attention, dropout)
  # Clones taken before any call share parameters and dropout-stream positions.
  plain, model_g, plain_g = (nnx.clone(model) for _ in range(3))
  tokens = jax.random.randint(jax.random.key(1), (2, 24), 3, 28)
  np.testing.assert_allclose(model(tokens), _plain(plain, tokens), rtol=1e-5, atol=1e-5)
  loss = lambda m: jnp.sum(jnp.sin(m(tokens)))
  plain_loss = lambda m: jnp.sum(jnp.sin(_plain(m, tokens)))
  got = jax.tree.leaves(nnx.grad(loss)(model_g))
  want = jax.tree.leaves(nnx.grad(plain_loss)(plain_g))
  assert len(got) == len(want) > 30
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * float(jnp.abs(w).max()) + 1e-7)


def test_reversible_reformer_is_causal_and_learns():
  model = _model("reformer", 0.0)
  tokens = jax.random.randint(jax.random.key(2), (4, 24), 3, 28)
  base = model(tokens)
  changed = tokens.at[:, 12:].set(5)
  np.testing.assert_allclose(model(changed)[:, :12], base[:, :12], rtol=1e-5, atol=1e-5)
  optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer):
    def loss_fn(m):
      return optax.softmax_cross_entropy_with_integer_labels(m(tokens[:, :-1]), tokens[:, 1:]).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
  losses = [float(step(model, optimizer)) for _ in range(10)]
  assert losses[-1] < losses[0] - 0.3, losses
