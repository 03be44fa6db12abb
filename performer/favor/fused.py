"""FAVOR as fused Pallas kernels: one program per (sequence, head) computes q' and k' from q, k
and W in-kernel and keeps the chunk loop's state on chip; interpret mode where there is no GPU."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from performer.favor import bidirectional, causal as causal_pass, decoding, kernels, numerics


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
  """Chunk after chunk of one sequence and head: causal.py's chunk steps on [C, .] arrays
  (its stabilisation and exact path included), the prefix state (S, z, c) carried in the
  loop, never stored."""
  del n_k  # causal: n_q == n_k
  featurize, size = _featurizer(setting, w_ref, s_ref, has_w), setting.block
  dtype = setting.operand_dtype

  def chunk(i, carry):
    state, poisoned = carry
    at = pl.ds(i * size, size)
    qf, kf, v = featurize(q_ref[at, :]), featurize(k_ref[at, :]), v_ref[at, :]
    k_log = causal_pass.key_logs(kf, keep_ref[at] > 0)  # [C, M or 1]
    bounded = kf.log is None
    one = pl.ds(i * size, 1)  # the first key again: Triton has no slice of a loaded array
    first = causal_pass.key_logs(featurize(k_ref[one, :]), keep_ref[one] > 0)  # [1, M or 1]
    out, ref = causal_pass.read_chunk(state, qf, kf.value, k_log, first, v, dtype,
                                      bounded=bounded, carried=True,
                                      renormalize=setting.renormalize)
    o_ref[at, :] = out
    if not bounded:  # rows past a key grown beyond the headroom: token by token, exact
      grown = jnp.min(causal_pass.fast_rows(k_log - ref).astype(jnp.int32)) == 0  # no all()
      jax.lax.cond(grown, functools.partial(_exact_rows, setting, o_ref), lambda *_: None,
                   i * size, state, ref, qf, kf._replace(log=k_log), v)
      # A token past MAX_NORM (NaN logs) makes its output NaN, and a key every later one, as
      # the XLA forms do, said explicitly: NaN through exp and max in a compiled kernel is
      # the compiler's choice (XLA's CPU compile of interpret mode lost it).
      nan_rows = lambda log: jnp.sum(jnp.isnan(log).astype(jnp.int32), axis=-1) > 0  # [C]
      keys = jnp.cumsum(nan_rows(k_log).astype(jnp.int32)) > 0
      o_ref[at, :] = jnp.where((poisoned | keys | nan_rows(qf.log))[:, None], jnp.nan,
                               o_ref[at, :])
      poisoned = poisoned | (jnp.max(keys.astype(jnp.int32)) > 0)
    return causal_pass.merge(state, causal_pass.chunk_state(kf.value, k_log, v, dtype,
                                                            bounded)), poisoned

  state = numerics.empty_state(featurize, q_ref.shape[-1], v_ref.shape[-1])
  jax.lax.fori_loop(0, n_q, chunk, (state, jnp.asarray(False)))


def _exact_rows(setting, o_ref, start, state, ref, qf, kf, v):
  """The causal pass's exact path inside the kernel: decoding.token_update reads the chunk at
  row `start` token by token from the state before it, and rows from the first key grown past
  the headroom over the chunk's reference ref [1, M or 1] on are overwritten.

  qf, kf: the chunk's `Features` of [C, .] (key logs masked); v [C, dv]. Token t's row is
  taken by a masked sum: Triton cannot index an array it has loaded.
  """
  rows = jnp.arange(setting.block)[:, None]
  row = lambda x, t: None if x is None else jnp.sum(jnp.where(rows == t, x, 0.0), axis=0)
  features = lambda f, t: f._replace(value=row(f.value, t), log=row(f.log, t))

  def token(t, carry):
    state, grown = carry
    k_t = features(kf, t)
    grown = jnp.logical_or(grown, jnp.max(k_t.log - ref) > causal_pass.HEADROOM)
    state, out = decoding.token_update(state, features(qf, t), k_t, row(v, t).astype(
        jnp.float32), setting.renormalize)
    at = pl.ds(start + t, 1)
    o_ref[at, :] = jnp.where(grown, out[None], o_ref[at, :])
    return state, grown

  jax.lax.fori_loop(0, setting.block, token, (state, jnp.asarray(False)))


def _bidirectional_kernel(q_ref, k_ref, v_ref, keep_ref, w_ref, s_ref, o_ref, *, setting,
                          has_w, n_q, n_k):
  """One sequence and head: K'^T V and K'^T 1 reduced over the key blocks in one loop, then
  every block of queries read against them in a second (bidirectional.py's block steps, on
  [C, .] arrays)."""
  featurize, size = _featurizer(setting, w_ref, s_ref, has_w), setting.block

  def keys(i, state):
    at = pl.ds(i * size, size)
    return bidirectional.add_keys(state, featurize(k_ref[at, :]), v_ref[at, :],
                                  keep_ref[at] > 0, setting.operand_dtype)

  state = jax.lax.fori_loop(0, n_k, keys, numerics.empty_state(
      featurize, k_ref.shape[-1], v_ref.shape[-1]))

  def queries(i, _):
    at = pl.ds(i * size, size)
    o_ref[at, :] = bidirectional.read_queries(state, featurize(q_ref[at, :]),
                                              setting.operand_dtype, setting.renormalize)

  jax.lax.fori_loop(0, n_q, queries, None)
