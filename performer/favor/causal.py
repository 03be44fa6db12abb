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
  state = empty_state(featurize_k, k.shape[-1], batch, heads, dv)
  xs = (blocks.blocks(q, span), blocks.blocks(k, span), blocks.blocks(v, span),
        blocks.blocks(mask[:, :, None, None], span)[..., 0, 0])  # [n, B, span, ...]
  step = functools.partial(span_step, featurize_q, featurize_k, chunk, operand_dtype,
                           carried=span < length, renormalize=renormalize)
  if length > chunk:
    step = jax.checkpoint(step)
  return blocks.unblock(blocks.scan(step, state, xs)[1], length)


def empty_state(featurize_k, d, batch, heads, dv):
  """The prefix state (S [B, H, M, dv], z [B, H, M], c [B, H, M or 1]) before any token,
  float32; featurize_k maps keys of d coordinates to M features. Bounded features keep c = 0."""
  size = jax.eval_shape(featurize_k, jax.ShapeDtypeStruct((1, 1, 1, d), jnp.float32))
  m = (size.value if size.value is not None else size.log).shape[-1]
  refs = 1 if size.log is None else size.log.shape[-1]
  no_key = 0.0 if size.log is None else numerics.NO_KEY
  return (jnp.zeros((batch, heads, m, dv), jnp.float32),
          jnp.zeros((batch, heads, m), jnp.float32),
          jnp.full((batch, heads, refs), no_key, jnp.float32))


def span_step(featurize_q, featurize_k, chunk, operand_dtype, state, xs, *, carried,
              renormalize=True):
  """One span of n chunks, all at once: (state before, inputs) -> (state after, outputs).
  (fused.py's kernel runs it one chunk at a time.)

  state: (S [B, H, M, dv], z [B, H, M], c [B, H, M or 1]) against reference c;
  xs: q, k [B, T, H, d], v [B, T, H, dv], keep [B, T] with T = n C.
  carried: False when the span is the whole sequence (the state before is
  empty, the one after unused): a single chunk then computes neither.
  Returns the state after the span and outputs [B, T, H, dv] float32.
  """
  sg = jax.lax.stop_gradient
  q, k, v, keep = xs
  batch, length, heads, dv = v.shape
  n = length // chunk
  split = lambda x: x.reshape(x.shape[:2] + (n, chunk) + x.shape[3:])  # [B, H, T, .] -> chunks
  qf, kf = featurize_q(blocks.heads_first(q)), featurize_k(blocks.heads_first(k))
  bounded = kf.log is None  # bounded features need no reference: c stays 0
  zero_log = jnp.zeros(qf.value.shape[:-1] + (1,), jnp.float32) if bounded else None
  q_value, k_value = (None if f.value is None else split(f.value) for f in (qf, kf))
  q_log = split(zero_log if bounded else qf.log)  # [B, H, n, C, M or 1]
  keep = keep.reshape(batch, 1, n, chunk, 1)
  k_log = jnp.where(keep, split(zero_log if bounded else kf.log), -jnp.inf)
  v = split(blocks.heads_first(v))  # [B, H, n, C, dv]
  low = lambda x: x.astype(operand_dtype)
  dot = functools.partial(jnp.einsum, preferred_element_type=jnp.float32)

  # Each chunk's own state against its own maximum (every term <= 1), then the
  # states before each chunk: the carried state in front, an inclusive scan.
  c_own = (jnp.zeros(k_log.shape[:3] + (1,), jnp.float32) if bounded
           else sg(jnp.maximum(jnp.max(k_log, axis=3), numerics.NO_KEY)))  # [B, H, n, M or 1]
  k_own = low(numerics.times(k_value, jnp.exp(k_log - c_own[:, :, :, None])))
  own = (dot("bhncm,bhncd->bhnmd", k_own, low(v)), jnp.sum(k_own.astype(jnp.float32), axis=3),
         c_own)
  if n == 1:  # the sequential pass: the state before is the carried one
    s, z, c = (x[:, :, None] for x in state)
    after = _merge(state, jax.tree.map(lambda x: x[:, :, 0], own)) if carried else state
  else:
    s, z, c = jax.lax.associative_scan(_merge, jax.tree.map(
        lambda a, b: jnp.concatenate([a[:, :, None], b], axis=2), state, own),
        axis=2)  # [B, H, n + 1, ...]: before chunk 0, ..., after chunk n - 1
    s, z, c, after = s[:, :, :-1], z[:, :, :-1], c[:, :, :-1], (s[:, :, -1], z[:, :, -1],
                                                                c[:, :, -1])

  ref = c if bounded else sg(jnp.maximum(c, k_log[:, :, :, 0]))  # c_f at each chunk's start
  rel = k_log - ref[:, :, :, None]  # each key's growth over its chunk's reference
  n_t = sg(jnp.max(q_log + ref[:, :, :, None], axis=-1, keepdims=True))  # N_t: [B, H, n, C, 1]
  q_prime = low(numerics.times(q_value, jnp.exp(q_log + ref[:, :, :, None] - n_t)))  # <= 1
  # Clipped keys are seen only by queries that take the exact path.
  k_prime = low(numerics.times(k_value, jnp.exp(jnp.minimum(rel, HEADROOM))))  # <= e^60
  to_ref = jnp.exp(c - ref)  # [B, H, n, M or 1], <= 1: the state against the reference
  causal_mask = jnp.tril(jnp.ones((chunk, chunk), bool))
  scores = low(jnp.where(causal_mask, dot("bhntm,bhnjm->bhntj", q_prime, k_prime), 0.0))
  num = dot("bhntj,bhnjd->bhntd", scores, low(v))
  den = jnp.sum(scores.astype(jnp.float32), axis=-1)
  if carried or n > 1:  # what the chunks before say (nothing, for the sequence's one chunk)
    num += dot("bhntm,bhnmd->bhntd", q_prime, low(s * to_ref[..., None]))
    den += jnp.einsum("bhntm,bhnm->bhnt", q_prime.astype(jnp.float32), z * to_ref)
  out = numerics.normalise(num, den, renormalize)  # [B, H, n, C, dv]

  if not bounded:
    # Query t takes the product while no key j <= t of its chunk has grown past the headroom.
    fast = jnp.cumsum(sg(jnp.max(rel, axis=-1)) > HEADROOM, axis=-1) == 0  # [B, H, n, C]
    needed = jnp.logical_not(jnp.all(fast, axis=(0, 1, 3)))  # [n]; a float below (has a VJP)
    by_chunk = jax.tree.map(lambda x: jnp.moveaxis(x, 2, 0), (  # [n, B, H, ...]
        (s, z, c), Features(q_value, q_log), Features(k_value, k_log), v))
    exact = _if_needed(_exact_chunks, jnp.any(needed), (needed.astype(jnp.float32),) + by_chunk)
    out = jnp.where(fast[..., None], out, jnp.moveaxis(exact, 0, 2))
  return after, blocks.heads_first(out.reshape(batch, heads, length, dv))


def _merge(a, b):
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
