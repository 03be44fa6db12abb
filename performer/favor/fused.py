"""FAVOR as fused Pallas kernels: one program per (sequence, head) computes q' and k' from q, k
and W in-kernel and keeps the chunk loop's state on chip; interpret mode where there is no GPU."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from performer.favor import bidirectional, causal as causal_pass, kernels, numerics


class Setting(NamedTuple):
  """What a kernel is compiled for (static): the `favor_attention` arguments of that name;
  block is the causal chunk C or the bidirectional block length, in tokens."""
  kernel: str
  causal: bool
  block: int
  operand_dtype: str
  renormalize: bool


def supports(kernel):
  """Whether the fused kernels compute `kernel`: all but the data-dependent ones, whose
  per-sequence parameters they do not read."""
  return kernel not in kernels.DATA_DEPENDENT_KERNELS


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def attend(xla, setting, q, k, v, mask, W, scale, kernel_epsilon):
  """FAVOR by the fused kernel: float32 [B, Lq, H, dv], equal to `xla`'s up to float rounding.

  xla: the XLA form of the same attention, called as xla(q, k, v, mask, W, scale,
  kernel_epsilon); the backward pass is its VJP, which recomputes the features span by span.
  q, k [B, L, H, d]; v [B, Lk, H, dv]; mask [B, Lk] bool; W [m, d] or None; scale and
  kernel_epsilon float32 scalars. Lengths need not be multiples of setting.block.
  """
  return _pallas(setting, q, k, v, mask, W, scale, kernel_epsilon)


def _attend_fwd(xla, setting, *args):
  return attend(xla, setting, *args), args


def _attend_bwd(xla, setting, args, g):
  q, k, v, mask, W, scale, kernel_epsilon = args
  _, vjp = jax.vjp(lambda q, k, v, W, s, e: xla(q, k, v, mask, W, s, e),
                   q, k, v, W, scale, kernel_epsilon)
  dq, dk, dv, dW, dscale, depsilon = vjp(g)
  return dq, dk, dv, None, dW, dscale, depsilon


attend.defvjp(_attend_fwd, _attend_bwd)


def _pallas(setting, q, k, v, mask, W, scale, kernel_epsilon):
  """The pallas_call: grid (B H,), each program one sequence and head, rows padded to blocks."""
  batch, lq, heads, d = q.shape
  lk, dv = k.shape[1], v.shape[-1]
  size = setting.block
  n_q, n_k = -(-lq // size), -(-lk // size)

  def rows(x, n):  # [B, L, H, e] -> [B H, n C, e], zero rows past L
    x = jnp.swapaxes(x, 1, 2).reshape(batch * heads, x.shape[1], x.shape[-1])
    return jnp.pad(x, [(0, 0), (0, n * size - x.shape[1]), (0, 0)])

  keep = jnp.pad(mask.astype(jnp.float32), [(0, 0), (0, n_k * size - lk)])  # padding: no key
  w = jnp.zeros((1, d), jnp.float32) if W is None else W.astype(jnp.float32)
  scalars = jnp.stack([scale, kernel_epsilon]).astype(jnp.float32)
  one = lambda shape: pl.BlockSpec((None,) + shape, lambda i: (i, 0, 0))
  whole = lambda shape: pl.BlockSpec(shape, lambda i: (0,) * len(shape))
  body = _causal_kernel if setting.causal else _bidirectional_kernel
  out = pl.pallas_call(
      functools.partial(body, setting=setting, has_w=W is not None, n_q=n_q, n_k=n_k),
      grid=(batch * heads,),
      in_specs=[one((n_q * size, d)), one((n_k * size, d)), one((n_k * size, dv)),
                pl.BlockSpec((None, n_k * size), lambda i: (i // heads, 0)),
                whole(w.shape), whole((2,))],
      out_specs=one((n_q * size, dv)),
      out_shape=jax.ShapeDtypeStruct((batch * heads, n_q * size, dv), jnp.float32),
      interpret=jax.default_backend() != "gpu",
      compiler_params=pltriton.CompilerParams(),  # Triton, not Mosaic GPU: whole rows per program
  )(rows(q, n_q), rows(k, n_k), rows(v, n_k), keep, w, scalars)
  return jnp.swapaxes(out[:, :lq].reshape(batch, heads, lq, dv), 1, 2)


def _featurizer(setting, w_ref, s_ref, has_w):
  """numerics.featurize with this program's W, scale and kernel_epsilon, read on chip."""
  return functools.partial(numerics.featurize, W=w_ref[...] if has_w else None,
                           kernel=setting.kernel, scale=s_ref[0], kernel_epsilon=s_ref[1])


def _causal_kernel(q_ref, k_ref, v_ref, keep_ref, w_ref, s_ref, o_ref, *, setting, has_w, n_q,
                   n_k):
  """Chunk after chunk of one sequence and head: causal.py's chunk step (its stabilisation and
  exact path included) with the prefix state (S, z, c) carried in the loop, never stored."""
  del n_k  # causal: n_q == n_k
  featurize, size = _featurizer(setting, w_ref, s_ref, has_w), setting.block
  per_chunk = lambda x: x[None, :, None]  # [C, e] -> [B = 1, C, H = 1, e]

  def chunk(i, state):
    at = pl.ds(i * size, size)
    xs = (per_chunk(q_ref[at, :]), per_chunk(k_ref[at, :]), per_chunk(v_ref[at, :]),
          keep_ref[at][None] > 0)
    state, out = causal_pass.span_step(featurize, featurize, size, setting.operand_dtype,
                                       state, xs, carried=True,
                                       renormalize=setting.renormalize)
    o_ref[at, :] = out[0, :, 0]
    return state

  state = causal_pass.empty_state(featurize, q_ref.shape[-1], 1, 1, v_ref.shape[-1])
  jax.lax.fori_loop(0, n_q, chunk, state)


def _bidirectional_kernel(q_ref, k_ref, v_ref, keep_ref, w_ref, s_ref, o_ref, *, setting,
                          has_w, n_q, n_k):
  """One sequence and head: K'^T V and K'^T 1 reduced over the key blocks in one loop, then
  every block of queries read against them in a second (bidirectional.py's block steps)."""
  featurize, size = _featurizer(setting, w_ref, s_ref, has_w), setting.block
  per_block = lambda x: x[None, None]  # [C, e] -> [B = 1, H = 1, C, e]

  def keys(i, state):
    at = pl.ds(i * size, size)
    return bidirectional.add_keys(state, featurize(per_block(k_ref[at, :])),
                                  per_block(v_ref[at, :]), (keep_ref[at] > 0)[None, None],
                                  setting.operand_dtype)

  state = jax.lax.fori_loop(0, n_k, keys, bidirectional.empty_state(
      featurize, k_ref.shape[-1], 1, 1, v_ref.shape[-1]))

  def queries(i, _):
    at = pl.ds(i * size, size)
    o_ref[at, :] = bidirectional.read_queries(state, featurize(per_block(q_ref[at, :])),
                                              setting.operand_dtype, setting.renormalize)[0, 0]

  jax.lax.fori_loop(0, n_q, queries, None)
