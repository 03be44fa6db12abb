"""Causal FAVOR, App. B.1, chunk by chunk (see attention.py for the numerics).

Each chunk is masked quadratic attention inside it plus a running K'^T V
and K'^T 1 state carried across chunks. A chunk is computed in one product
against one reference, c_f at its first position; a key may outgrow it by
`HEADROOM` nats. From the first key that grows further, the chunk's queries
are recomputed token by token (decoding.token_update, exact at any growth);
the carried state always moves to the chunk's last c_f, where every stored
term is <= 1. Every constant used at position t, the choice of path
included, depends only on tokens <= t, so outputs never depend on later
tokens, not even through rounding.
"""

import functools
import math

import jax
import jax.numpy as jnp

from performer.favor import blocks, decoding, numerics

# A key may exceed the chunk's reference by this many nats: e^60 times m
# features times C keys times |v| stays inside float32, and a query factor
# e^-60 times a term's own e^-27 stays a normal number.
HEADROOM = 60.0


def causal(q, k, v, mask, featurize_q, featurize_k, chunk):
  """Causal FAVOR; q, k, v float32 [B, L, H, e] -> [B, L, H, dv].

  Features are computed inside each chunk (and recomputed in the backward
  pass), so no L x M array is ever stored. featurize_q, featurize_k:
  [B, H, C, d] -> `Features` of [B, H, C, M].
  """
  batch, length, heads, dv = v.shape
  size = featurize_k(blocks.heads_first(k[:, :1]))
  m = (size.value if size.value is not None else size.log).shape[-1]
  c0 = None if size.log is None else jnp.full((batch, heads, size.log.shape[-1]),
                                              numerics.NO_KEY, jnp.float32)
  s0 = jnp.zeros((batch, heads, m, dv), jnp.float32)
  z0 = jnp.zeros((batch, heads, m), jnp.float32)
  xs = (blocks.blocks(q, chunk), blocks.blocks(k, chunk), blocks.blocks(v, chunk),
        blocks.mask_blocks(mask, chunk))
  step = jax.checkpoint(functools.partial(_chunk, featurize_q, featurize_k))
  _, out = jax.lax.scan(step, (s0, z0, c0), xs)
  return blocks.unblock(out, length)


def _chunk(featurize_q, featurize_k, carry, xs):
  """One chunk: intra-chunk quadratic part plus the carried prefix state.

  Queries from the first key that outgrows the chunk's reference by more
  than `HEADROOM` on are recomputed token by token (`_rows_by_token`).
  """
  s, z, c = carry  # K'^T V [B, H, M, dv], K'^T 1 [B, H, M], [B, H, M or 1] or None
  q_blk, k_blk, v, keep = xs  # [B, C, H, d], [B, C, H, d], [B, C, H, dv], [B, 1, C]
  qf = featurize_q(blocks.heads_first(q_blk))
  kf, v = featurize_k(blocks.heads_first(k_blk)), blocks.heads_first(v)
  chunk = v.shape[2]
  keep = keep[..., None]
  causal_mask = jnp.tril(jnp.ones((chunk, chunk), bool))
  if kf.log is None:  # bounded features: no references needed
    k_prime = jnp.where(keep, kf.value, 0.0)  # [B, H, C, M]
    scores = jnp.where(causal_mask, jnp.einsum("bhtm,bhjm->bhtj", qf.value, k_prime), 0.0)
    num = jnp.einsum("bhtj,bhjd->bhtd", scores, v) + jnp.einsum("bhtm,bhmd->bhtd", qf.value, s)
    den = jnp.sum(scores, axis=-1) + jnp.einsum("bhtm,bhm->bht", qf.value, z)
    s = s + jnp.einsum("bhjm,bhjd->bhmd", k_prime, v)
    return (s, z + jnp.sum(k_prime, axis=2), c), blocks.heads_first(numerics.divide(num, den))

  sg = jax.lax.stop_gradient
  k_log = jnp.where(keep, kf.log, -jnp.inf)
  c_t = sg(_prefix_max(k_log, c[:, :, None]))  # c_f(t): [B, H, C, M or 1], causal
  n_t = sg(jnp.max(qf.log + c_t, axis=-1, keepdims=True))  # N_t: [B, H, C, 1]
  ref = c_t[:, :, :1]  # the chunk's reference: c_f at its first position, <= t for every t
  rel = k_log - ref  # each key's growth over the reference
  # Query t is computed in one product while no key j <= t of the chunk has
  # grown past the headroom; from the first one that has, token by token.
  fast = jnp.cumsum(sg(jnp.max(rel, axis=-1)) > HEADROOM, axis=-1) == 0  # [B, H, C]
  q_prime = numerics.times(qf.value, jnp.exp(qf.log + ref - n_t))  # <= 1
  # Clipped keys are seen only by queries that take the exact path.
  k_prime = numerics.times(kf.value, jnp.exp(jnp.minimum(rel, HEADROOM)))  # <= e^60
  to_ref = jnp.exp(c - ref[:, :, 0])  # [B, H, M or 1], <= 1: the state against the reference
  scores = jnp.where(causal_mask, jnp.einsum("bhtm,bhjm->bhtj", q_prime, k_prime), 0.0)
  num = (jnp.einsum("bhtj,bhjd->bhtd", scores, v)  # [B, H, C, dv]
         + jnp.einsum("bhtm,bhmd->bhtd", q_prime, s * to_ref[..., None]))
  den = jnp.sum(scores, axis=-1) + jnp.einsum("bhtm,bhm->bht", q_prime, z * to_ref)
  out = numerics.divide(num, den)

  exact = _rows_if_needed(jnp.logical_not(jnp.all(fast)), (s, z, c), qf, kf._replace(log=k_log),
                          v)
  out = jnp.where(fast[..., None], out, exact)

  # The state moves to the chunk's last reference: every stored term <= 1, at any growth.
  c_end = c_t[:, :, -1]  # [B, H, M or 1]
  k_state = numerics.times(kf.value, jnp.exp(k_log - c_end[:, :, None]))
  decay = jnp.exp(c - c_end)
  s = s * decay[..., None] + jnp.einsum("bhjm,bhjd->bhmd", k_state, v)
  z = z * decay + jnp.sum(k_state, axis=2)
  return (s, z, c_end), blocks.heads_first(out)


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

  _, out = jax.lax.scan(one_group, state, jax.tree.map(per_token, (qf, kf, v)))
  return jnp.moveaxis(out.reshape((chunk,) + out.shape[2:]), 0, 2)


@jax.custom_vjp
def _rows_if_needed(needed, state, qf, kf, v):
  """`_rows_by_token` if `needed` (a traced bool), else zeros, in both passes.

  Its own VJP, because autodiff of a `lax.cond` fills the branch not taken
  with zero residuals in every chunk: measured 1.2x slower on CPU even when
  no chunk needed the exact path.
  """
  return jax.lax.cond(needed, _rows_by_token, lambda *args: jnp.zeros_like(args[-1]),
                      state, qf, kf, v)


def _rows_if_needed_fwd(needed, state, qf, kf, v):
  return _rows_if_needed(needed, state, qf, kf, v), (needed, state, qf, kf, v)


def _rows_if_needed_bwd(residuals, g):
  needed, *args = residuals
  grads = jax.lax.cond(needed, lambda: jax.vjp(_rows_by_token, *args)[1](g),
                       lambda: jax.tree.map(jnp.zeros_like, tuple(args)))
  return (None, *grads)


_rows_if_needed.defvjp(_rows_if_needed_fwd, _rows_if_needed_bwd)


def _prefix_max(x, start):
  """max(start, x[..., :t+1, :]) along axis 2 for every t: c_f(t) of a chunk.

  On CPU a sequential scan over the C positions, which measured 1.6x faster
  per chunk than lax.cummax's lowering there; elsewhere lax.cummax, whose
  parallel scan suits accelerators. Max is exact, so both give the same bits.
  """
  if jax.default_backend() != "cpu":
    return jnp.maximum(start, jax.lax.cummax(x, axis=2))
  xs = jnp.moveaxis(x, 2, 0)
  _, out = jax.lax.scan(lambda c, r: (jnp.maximum(c, r),) * 2,
                        jnp.broadcast_to(start[:, :, 0], xs.shape[1:]), xs)
  return jnp.moveaxis(out, 0, 2)
