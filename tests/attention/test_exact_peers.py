"""The exact-attention peers (blockwise, jax.nn.dot_product_attention) against softmax_attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from performer import attention, favor
from performer.attention import dot_product
from performer.attention.blockwise import blockwise_attention
from testlib import qkv

B, L, H, D = 2, 37, 3, 8  # 37: no block length divides it


def _qkv(seed=0, scale=2.0, length=L):
  return qkv((B, length, H, D), seed, scale)


def _mask():
  mask = np.ones((B, L), bool)
  mask[1, 20:] = False  # padding at the end
  mask[0, :5] = False  # and at the start: causal queries 0-4 of sequence 0 see no real key
  return jnp.asarray(mask)


def _peer(name, **options):
  return attention.make(name, num_heads=H, head_dim=D, max_len=64, rngs=nnx.Rngs(0), **options)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("peer", [
    lambda q, k, v, **kw: blockwise_attention(q, k, v, block=1, **kw),
    lambda q, k, v, **kw: blockwise_attention(q, k, v, block=5, **kw),
    lambda q, k, v, **kw: blockwise_attention(q, k, v, block=16, **kw),
    lambda q, k, v, **kw: _peer("exact_blockwise")(q, k, v, **kw),  # one block: 512 > L
    lambda q, k, v, **kw: _peer("exact_dot_product")(q, k, v, **kw),
], ids=["blockwise1", "blockwise5", "blockwise16", "blockwise_backend", "dot_product"])
def test_peers_equal_exact_softmax_attention(peer, causal, masked):
  q, k, v = _qkv()
  mask = _mask() if masked else None
  expected = favor.softmax_attention(q, k, v, causal=causal, mask=mask)
  np.testing.assert_allclose(peer(q, k, v, causal=causal, mask=mask), expected, rtol=1e-5,
                             atol=1e-5)


def test_blockwise_with_fewer_keys_than_queries_and_its_gradients():
  q, k, v = _qkv(1)
  k, v = k[:, :13], v[:, :13]
  np.testing.assert_allclose(blockwise_attention(q, k, v, block=4),
                             favor.softmax_attention(q, k, v), rtol=1e-5, atol=1e-5)
  q, k, v = _qkv(2)
  g = jax.random.normal(jax.random.key(3), v.shape)
  for causal in (False, True):
    grads = [jax.grad(lambda q, k, v: jnp.sum(g * fn(q, k, v, causal=causal, mask=_mask())),
                      argnums=(0, 1, 2))(q, k, v)
             for fn in (lambda *a, **kw: blockwise_attention(*a, block=8, **kw),
                        favor.softmax_attention)]
    for got, want in zip(*grads):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_blockwise_never_builds_an_l_by_l_tensor(largest_intermediate):
  length, block = 512, 16
  x = jnp.zeros((1, length, 1, D))
  fn = lambda q, k, v: blockwise_attention(q, k, v, causal=True, block=block)
  for f in (fn, jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v)), argnums=(0, 1, 2))):
    largest = largest_intermediate(f, x, x, x)
    assert largest < length * length // 4, largest  # L x L = 262,144


def test_dot_product_says_which_implementation_runs_and_bad_arguments_raise():
  assert dot_product.implementation(jnp.float32) == "xla"  # every dtype but half on a GPU
  expected = "cudnn" if jax.default_backend() == "gpu" else "xla"
  assert dot_product.implementation(jnp.bfloat16) == expected
  q, k, v = _qkv()
  with pytest.raises(ValueError, match="block must be"):
    blockwise_attention(q, k, v, block=0)
  with pytest.raises(ValueError, match="Lq == Lk"):
    blockwise_attention(q[:, :5], k, v, causal=True)
  with pytest.raises(ValueError, match="mask must be"):
    _peer("exact_dot_product")(q, k, v, mask=jnp.ones((B, L + 1), bool))
