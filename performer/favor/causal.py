"""Causal FAVOR, App. B.1, in chunkwise-parallel form: masked quadratic chunks plus a prefix state.

No output depends on later tokens, not even through rounding or the choice of exact path."""

import functools
import math

import jax
import jax.numpy as jnp

from performer.favor import blocks, decoding, numerics
from performer.favor.features import Features

# A key may exceed the chunk's reference by this many nats: e^60 times m
# features times C keys times |v| stays inside float32, and a query factor
# e^-60 times a term's own e^-27 stays a normal number.
HEADROOM = 60.0


def causal(q, k, v, mask, featurize_q, featurize_k, chunk, span, operand_dtype,
           renormalize=True):
  """Causal FAVOR; q, k [B, L, H, d], v [B, L, H, dv] float32 -> [B, L, H, dv] float32.

  chunk: C, tokens per chunk; span: tokens per loop step, rounded up to a
  multiple of C (>= L: no loop). featurize_q, featurize_k: [B, H, T, d] ->
  `Features` of [B, H, T, M]. operand_dtype: the dtype of the products'
  operands (float32 or bfloat16). Features are recomputed in the backward
  pass (`jax.checkpoint` per span), so only a span's features are stored;
  a sequence of one chunk keeps them (no more than exact attention's
  scores) and saves the recomputation, most of a small model's FAVOR cost.
  renormalize: False gives the prefix-sum numerator alone (bounded features only).
  """
  batch, length, heads, dv = v.shape
  span = min(-(-span // chunk), -(-length // chunk)) * chunk
  state = numerics.empty_state(featurize_k, k.shape[-1], dv, batch, heads)
  xs = (blocks.blocks(q, span), blocks.blocks(k, span), blocks.blocks(v, span),
        blocks.blocks(mask[:, :, None, None], span)[..., 0, 0])  # [n, B, span, ...]
  step = functools.partial(span_step, featurize_q, featurize_k, chunk, operand_dtype,
                           carried=span < length, renormalize=renormalize)
  if length > chunk:
    step = jax.checkpoint(step)
  return blocks.unblock(blocks.scan(step, state, xs)[1], length)


def span_step(featurize_q, featurize_k, chunk, operand_dtype, state, xs, *, carried,
              renormalize=True):
  """One span of n chunks, all at once: (state before, inputs) -> (state after, outputs).

  state: (S [B, H, M, dv], z [B, H, M], c [B, H, M or 1]) against reference c;
  xs: q, k [B, T, H, d], v [B, T, H, dv], keep [B, T] with T = n C.
  carried: False when the span is the whole sequence (the state before is
  empty, the one after unused): a single chunk then computes neither.
  Returns the state after the span and outputs [B, T, H, dv] float32.
  """
  q, k, v, keep = xs
  batch, length, heads, dv = v.shape
  n = length // chunk
  split = lambda x: None if x is None else x.reshape(x.shape[:2] + (n, chunk) + x.shape[3:])
  qf, kf = featurize_q(blocks.heads_first(q)), featurize_k(blocks.heads_first(k))
  bounded = kf.log is None  # bounded features need no reference: c stays 0
  qf, kf = (Features(split(f.value), split(f.log)) for f in (qf, kf))  # [B, H, n, C, .]
  k_log = key_logs(kf, keep.reshape(batch, 1, n, chunk))
  v = split(blocks.heads_first(v))  # [B, H, n, C, dv]

  # Each chunk's own state, then the states before each chunk: the carried state in front,
  # an inclusive scan.
  own = chunk_state(kf.value, k_log, v, operand_dtype, bounded)  # [B, H, n, ...]
  if n == 1:  # the sequential pass: the state before is the carried one
    before = jax.tree.map(lambda x: x[:, :, None], state)
    after = merge(state, jax.tree.map(lambda x: x[:, :, 0], own)) if carried else state
  else:
    states = jax.lax.associative_scan(merge, jax.tree.map(
        lambda a, b: jnp.concatenate([a[:, :, None], b], axis=2), state, own),
        axis=2)  # [B, H, n + 1, ...]: before chunk 0, ..., after chunk n - 1
    before = jax.tree.map(lambda x: x[:, :, :-1], states)
    after = jax.tree.map(lambda x: x[:, :, -1], states)
  out, ref = read_chunk(before, qf, kf.value, k_log, k_log[..., :1, :], v, operand_dtype,
                        bounded=bounded, carried=carried or n > 1, renormalize=renormalize)
  if not bounded:
    fast = fast_rows(k_log - ref)  # [B, H, n, C]
    needed = jnp.logical_not(jnp.all(fast, axis=(0, 1, 3)))  # [n]; a float below (has a VJP)
    by_chunk = jax.tree.map(lambda x: jnp.moveaxis(x, 2, 0), (  # [n, B, H, ...]
        before, qf, Features(kf.value, k_log), v))
    exact = _if_needed(_exact_chunks, jnp.any(needed), (needed.astype(jnp.float32),) + by_chunk)
    out = jnp.where(fast[..., None], out, jnp.moveaxis(exact, 0, 2))
  return after, blocks.heads_first(out.reshape(batch, heads, length, dv))


# The chunk steps below read any leading dimensions [...] (batch, heads, chunks, or none in
# fused.py's kernel) and make every product a matrix product of two 2D operands per leading
# index, or a sum of elementwise products: what a Triton kernel can lower.


def key_logs(kf, keep):
  """The keys' logs with masked keys at -inf: [..., C, M or 1] (0 for bounded features, which
  have none); kf `Features` of [..., C, M], keep [..., C] bool (or broadcasting)."""
  log = jnp.zeros(kf.value.shape[:-1] + (1,), jnp.float32) if kf.log is None else kf.log
  return jnp.where(keep[..., None], log, -jnp.inf)


def chunk_state(k_value, k_log, v, operand_dtype, bounded):
  """A chunk's own state (S [..., M, dv], z [..., M], c [..., M or 1]) against its own
  per-feature maximum c of the key logs (every term <= 1); bounded features keep c = 0.

  k_value [..., C, M] or None (read as 1); k_log [..., C, M or 1] from `key_logs`;
  v [..., C, dv].
  """
  c = (jnp.zeros(k_log.shape[:-2] + (1,), jnp.float32) if bounded
       else jax.lax.stop_gradient(jnp.maximum(jnp.max(k_log, axis=-2), numerics.NO_KEY)))
  k_own = numerics.times(k_value, jnp.exp(k_log - c[..., None, :])).astype(operand_dtype)
  return (_dot("...cm,...cd->...md", k_own, v.astype(operand_dtype)),
          jnp.sum(k_own.astype(jnp.float32), axis=-2), c)


def read_chunk(state, qf, k_value, k_log, first, v, operand_dtype, *, bounded, carried,
               renormalize):
  """A chunk's outputs: its own keys by the masked C x C product, the keys before it through
  the state before it (when carried). Returns (outputs [..., C, dv] float32, the chunk's
  reference c_f [..., 1, M or 1]: a key's log minus it is the growth `fast_rows` reads).

  state: (S, z, c) before the chunk, as `chunk_state` gives; qf `Features` of [..., C, M];
  k_value, k_log and v as `chunk_state` takes them; first: the chunk's first key log
  [..., 1, M or 1] (a slice of k_log; fused.py's kernel, which cannot slice, computes it).
  """
  sg = jax.lax.stop_gradient
  s, z, c = state
  low = lambda x: x.astype(operand_dtype)
  # c_f at the chunk's start: [..., 1, M or 1]
  ref = c[..., None, :] if bounded else sg(jnp.maximum(c[..., None, :], first))
  rel = k_log - ref  # each key's growth over its chunk's reference
  q_log = jnp.zeros(k_log.shape, jnp.float32) if bounded else qf.log  # [..., C, M or 1]
  n_t = sg(jnp.max(q_log + ref, axis=-1, keepdims=True))  # N_t: [..., C, 1]
  q_prime = low(numerics.times(qf.value, jnp.exp(q_log + ref - n_t)))  # <= 1
  # Clipped keys are seen only by queries that take the exact path.
  k_prime = low(numerics.times(k_value, jnp.exp(jnp.minimum(rel, HEADROOM))))  # <= e^60
  rows = jnp.arange(v.shape[-2])
  scores = low(jnp.where(rows[:, None] >= rows[None, :],
                         _dot("...tm,...jm->...tj", q_prime, k_prime), 0.0))
  num = _dot("...tj,...jd->...td", scores, low(v))
  den = jnp.sum(scores.astype(jnp.float32), axis=-1)
  if carried:  # what the chunks before say (nothing, for the sequence's one chunk)
    to_ref = jnp.exp(c - ref[..., 0, :])  # <= 1: the state against the reference
    num += _dot("...tm,...md->...td", q_prime, low(s * to_ref[..., None]))
    den += jnp.sum(q_prime.astype(jnp.float32) * (z * to_ref)[..., None, :], axis=-1)
  return numerics.normalise(num, den, renormalize), ref


def fast_rows(rel):
  """Query t takes the product while no key j <= t of its chunk has grown past the headroom:
  rel [..., C, M or 1] -> [..., C] bool."""
  return jnp.cumsum(jax.lax.stop_gradient(jnp.max(rel, axis=-1)) > HEADROOM, axis=-1) == 0


def _dot(spec, a, b):
  return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def merge(a, b):
  """Two states (S, z, c), each against its own reference c, as one against max(c_a, c_b).

  Associative; rescales by factors <= 1 and adds, never subtracts.
  """
  c = jnp.maximum(a[2], b[2])
  to_a, to_b = jnp.exp(a[2] - c), jnp.exp(b[2] - c)
  return a[0] * to_a[..., None] + b[0] * to_b[..., None], a[1] * to_a + b[1] * to_b, c


def _exact_chunks(needed, state, qf, kf, v):
  """The outputs of the chunks that need it by `_rows_by_token`, others 0: [n, B, H, C, dv].

  Arguments by chunk: needed [n] (1.0 where a chunk needs it); state
  ([n, B, H, M, dv], [n, B, H, M], [n, B, H, M or 1]) before each chunk; qf, kf `Features` of [n, B, H, C, .];
  v [n, B, H, C, dv]. A loop over chunks: it runs only when a key outgrows
  its chunk's reference by more than `HEADROOM` (one chunk: the caller's cond suffices).
  """
  if needed.shape[0] == 1:
    return _rows_by_token(*jax.tree.map(lambda x: x[0], (state, qf, kf, v)))[None]
  return jax.lax.map(lambda xs: _if_needed(_rows_by_token, xs[0] > 0, xs[1:]),
                     (needed, state, qf, kf, v))


def _rows_by_token(state, qf, kf, v):
  """A chunk's outputs by `decoding.token_update`, key by key: exact at any growth.

  state: (S, z, c) before the chunk; qf, kf: `Features` of [B, H, C, M];
  v: [B, H, C, dv]. Returns [B, H, C, dv]. The keys are read in groups of
  about sqrt(C), each recomputed in the backward pass, so that at most
  about 2 sqrt(C) states [B, H, M, dv] are stored, not C.
  """
  chunk = v.shape[2]
  group = max(g for g in range(1, math.isqrt(chunk) + 1) if chunk % g == 0)
  def per_token(x):  # [B, H, C, ...] -> [C / group, group, B, H, ...]
    x = jnp.moveaxis(x, 2, 0)
    return x.reshape((chunk // group, group) + x.shape[1:])

  @jax.checkpoint
  def one_group(state, xs):
    return jax.lax.scan(lambda st, x: decoding.token_update(st, *x), state, xs)

  v = v.astype(jnp.float32)
  _, out = jax.lax.scan(one_group, state, jax.tree.map(per_token, (qf, kf, v)))
  return jnp.moveaxis(out.reshape((chunk,) + out.shape[2:]), 0, 2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _if_needed(fn, needed, args):
  """fn(*args) if `needed` (a traced bool), else zeros shaped like args[-1], in both passes.

  Its own VJP, because autodiff of a `lax.cond` fills the branch not taken
  with zero residuals, which costs time even when no chunk needs the exact
  path.
  """
  return jax.lax.cond(needed, fn, lambda *a: jnp.zeros(a[-1].shape, jnp.float32), *args)


def _if_needed_fwd(fn, needed, args):
  return _if_needed(fn, needed, args), (needed, args)


def _if_needed_bwd(fn, residuals, g):
  needed, args = residuals
  grads = jax.lax.cond(needed, lambda: jax.vjp(fn, *args)[1](g),
                       lambda: jax.tree.map(jnp.zeros_like, tuple(args)))
  return None, grads


_if_needed.defvjp(_if_needed_fwd, _if_needed_bwd)
