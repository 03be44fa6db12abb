"""Reformer LSH attention against explicit sliding-window softmax when all tokens share a bucket."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer import attention
from performer.models.config import ModelConfig
from performer.models.transformer import TransformerLM

B, L, H, D = 2, 23, 2, 8


def _reference(q, v, window, causal):
  """Softmax over same-bucket keys within `window` places, self only when alone."""
  q, v = np.asarray(q, np.float64), np.asarray(v, np.float64)
  keys = q / np.linalg.norm(q, axis=-1, keepdims=True)
  out = np.zeros_like(v)
  for b in range(B):
    for h in range(H):
      for i in range(L):
        lo, hi = max(0, i - window), i if causal else min(L - 1, i + window)
        others = [j for j in range(lo, hi + 1) if j != i]
        js = others or [i]
        logits = np.array([q[b, i, h] @ keys[b, j, h] for j in js]) / np.sqrt(D)
        p = np.exp(logits - logits.max())
        out[b, i, h] = (p / p.sum()) @ v[b, js, h]
  return out


def _one_direction_inputs(seed=0):
  """Queries that are positive multiples of one vector: every token hashes alike."""
  ks = jax.random.split(jax.random.key(seed), 3)
  direction = jax.random.normal(ks[0], (1, 1, H, D))
  scale = 0.5 + jax.random.uniform(ks[1], (B, L, H, 1)) * 2
  return direction * scale, jax.random.normal(ks[2], (B, L, H, D))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("chunk", [4, 7, 64])
def test_matches_sliding_window_softmax(causal, chunk):
  q, v = _one_direction_inputs()
  module = attention.make("reformer", num_heads=H, head_dim=D, max_len=L, rngs=nnx.Rngs(0),
                          chunk_size=chunk, n_hashes=2, n_buckets=8)
  got = module(q, q, v, causal=causal)
  np.testing.assert_allclose(got, _reference(q, v, min(chunk, L), causal), rtol=2e-5, atol=2e-5)


def test_masked_keys_are_never_attended():
  q, v = _one_direction_inputs(1)
  mask = np.ones((B, L), bool)
  mask[:, 5:9] = False
  module = attention.make("reformer", num_heads=H, head_dim=D, max_len=L, rngs=nnx.Rngs(0),
                          chunk_size=64, n_hashes=1)
  got = module(q, q, v, mask=jnp.asarray(mask))
  v_changed = v.at[:, 5:9].set(1e3)
  changed = module(q, q, v_changed, mask=jnp.asarray(mask))
  for part in (slice(0, 5), slice(9, L)):  # every real position, before and after the masked span
    np.testing.assert_allclose(changed[:, part], got[:, part], rtol=1e-6)
  assert np.isfinite(np.asarray(got)).all()


def test_bad_options():
  for options, match in (({"n_buckets": 3}, "even"), ({"chunk_size": 0}, ">= 1")):
    with pytest.raises(ValueError, match=match):
      attention.make("reformer", num_heads=H, head_dim=D, max_len=L, rngs=nnx.Rngs(0), **options)


def test_rotations_are_redrawn_per_step_from_seed_layer_and_step():
  cfg = ModelConfig(vocab_size=28, max_len=L, num_layers=2, num_heads=H, d_model=H * D, d_ff=16,
                    attention="reformer", attention_options={"chunk_size": 4, "seed": 5},
                    reversible=True)
  model = TransformerLM(cfg, rngs=nnx.Rngs(0))
  twin = TransformerLM(cfg, rngs=nnx.Rngs(1))  # other parameters, same (seed, layer)
  q = jax.random.normal(jax.random.key(2), (B, L, H, D))
  draws = {}
  for step in (0, 1, 7):
    attention.redraw(model, step)
    attention.redraw(twin, step)
    for layer, block in enumerate(model.blocks):
      r = np.asarray(block.attn.rotations[...])
      np.testing.assert_array_equal(r, twin.blocks[layer].attn.rotations[...])
      draws[step, layer] = r
  values = list(draws.values())
  assert all(np.abs(a - b).max() > 0.1 for i, a in enumerate(values) for b in values[i + 1:])
  # A new draw hashes the same tokens into other buckets: different outputs.
  attn = model.blocks[0].attn
  attention.redraw(model, 0)
  first = attn(q, q, q, causal=True)
  attention.redraw(model, 1)
  assert not np.allclose(attn(q, q, q, causal=True), first, atol=1e-3)
  # Under jit with a traced step, as in training: the eager draw.
  graph, state = nnx.split(attn)
  def at(state, step):
    module = nnx.merge(graph, state)
    module.redraw(step)
    return module.rotations[...]
  np.testing.assert_allclose(jax.jit(at)(state, jnp.int32(7)), draws[7, 0], atol=1e-6)
