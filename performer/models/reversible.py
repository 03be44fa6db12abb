"""Reversible residual layers (Gomez et al. 2017; used by Reformer, Kitaev et al. 2020).

One custom VJP over the stack rebuilds each layer's inputs, so memory does not grow with depth."""

import functools

import jax
import jax.numpy as jnp
from flax import nnx


def _parts(graphdefs, params, others, mask, key, i):
  """F_i and G_i of layer i as pure functions of (its parameters, input)."""
  def f(p, x):
    return nnx.merge(graphdefs[i], p, others[i]).attention_part(x, mask, jax.random.fold_in(key, 2 * i))
  def g(p, x):
    return nnx.merge(graphdefs[i], p, others[i]).mlp_part(x, jax.random.fold_in(key, 2 * i + 1))
  return f, g


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _stack(graphdefs, params, others, x1, x2, mask, key):
  for i in range(len(graphdefs)):
    f, g = _parts(graphdefs, params, others, mask, key, i)
    x1 = x1 + f(params[i], x2)
    x2 = x2 + g(params[i], x1)
  return x1, x2


def _stack_fwd(graphdefs, params, others, x1, x2, mask, key):
  y1, y2 = _stack(graphdefs, params, others, x1, x2, mask, key)
  return (y1, y2), (params, others, y1, y2, mask, key)


def _stack_bwd(graphdefs, residuals, cotangents):
  params, others, y1, y2, mask, key = residuals
  dy1, dy2 = cotangents
  grads = [None] * len(graphdefs)
  for i in reversed(range(len(graphdefs))):
    f, g = _parts(graphdefs, params, others, mask, key, i)
    g_out, g_vjp = jax.vjp(g, params[i], y1)  # y2 = x2 + G(y1)
    x2 = y2 - g_out
    dp_g, dy1_g = g_vjp(dy2)
    dy1 = dy1 + dy1_g
    f_out, f_vjp = jax.vjp(f, params[i], x2)  # y1 = x1 + F(x2)
    x1 = y1 - f_out
    dp_f, dx2_f = f_vjp(dy1)
    grads[i] = jax.tree.map(jnp.add, dp_f, dp_g)
    y1, y2, dy2 = x1, x2, dy2 + dx2_f
  zeros = jax.tree.map(jnp.zeros_like, others)
  return grads, zeros, dy1, dy2, None, None


_stack.defvjp(_stack_fwd, _stack_bwd)


def reversible_stack(blocks, x, mask, key):
  """Runs `blocks` as reversible layers on x [B, L, d]; returns the mean of the two streams.

  Gradients flow to every nnx.Param of the blocks; other state (random
  features) is read, never changed.
  """
  graphdefs, params, others = [], [], []
  for block in blocks:
    graphdef, p, rest = nnx.split(block, nnx.Param, ...)
    graphdefs.append(graphdef)
    params.append(p)
    others.append(rest)
  y1, y2 = _stack(tuple(graphdefs), params, others, x, x, mask, key)
  return (y1 + y2) / 2
