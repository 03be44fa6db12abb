"""Reformer LSH attention (Kitaev et al. 2020; the paper's App. A.5 baseline), shared query/key.

Its hash rotations are redrawn every training step from (seed, layer, step)."""

import jax
import jax.numpy as jnp
from flax import nnx

from performer.attention.registry import RandomFeatures, kv_cache_size, register

_SELF = -1e5  # logit of a token for itself: used only when nothing else is visible


@register("reformer", label="Reformer", colour="C1")
class ReformerAttention(nnx.Module):
  """LSH attention with n_hashes rounds of n_buckets buckets, chunks of chunk_size."""

  state_size = staticmethod(kv_cache_size)  # the registry's BackendInfo.state_size

  def __init__(self, *, head_dim, layer=0, n_hashes=2, n_buckets=16, chunk_size=32, seed=0):
    if n_buckets < 2 or n_buckets % 2:
      raise ValueError(f"n_buckets must be an even number >= 2, got {n_buckets}")
    if n_hashes < 1 or chunk_size < 1:
      raise ValueError("n_hashes and chunk_size must be >= 1")
    self.n_hashes, self.n_buckets, self.chunk_size = n_hashes, n_buckets, chunk_size
    self.head_dim, self.layer, self.seed = head_dim, layer, seed
    self.rotations = RandomFeatures(self.draw(0))  # [n_hashes, d, n_buckets / 2]

  def draw(self, step):
    """The random rotations R of training step `step` (an int or a traced integer)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), self.layer), step)
    return jax.random.normal(key, (self.n_hashes, self.head_dim, self.n_buckets // 2))

  def redraw(self, step):
    """Sets the rotations to `draw(step)`: once per training step, never in eval."""
    self.rotations[...] = self.draw(step)

  def __call__(self, q, k, v, *, mask=None, causal=False):
    del k  # shared QK
    batch, length, heads, d = q.shape
    c = min(self.chunk_size, length)
    padded = -(-length // c) * c
    pad = [(0, 0), (0, padded - length), (0, 0), (0, 0)]
    q32 = jnp.pad(q.astype(jnp.float32), pad).transpose(0, 2, 1, 3)  # [B, H, Lp, d]
    v32 = jnp.pad(v.astype(jnp.float32), pad).transpose(0, 2, 1, 3)
    real = jnp.arange(padded) < length
    keep = real[None, :] if mask is None else jnp.pad(mask, [(0, 0), (0, padded - length)]) & real
    keep = jnp.broadcast_to(keep[:, None, :], (batch, heads, padded))  # [B, H, Lp]

    keys = q32 / (jnp.linalg.norm(q32, axis=-1, keepdims=True) + 1e-6)
    proj = jnp.einsum("bhld,rdn->bhrln", keys, self.rotations[...])  # [B, H, R, Lp, nb/2]
    buckets = jnp.argmax(jnp.concatenate([proj, -proj], -1), -1)
    buckets = jnp.where(real, buckets, self.n_buckets)  # internal padding: a bucket of its own
    order = jnp.argsort(buckets * padded + jnp.arange(padded), axis=-1)  # [B, H, R, Lp]
    undo = jnp.argsort(order, axis=-1)

    def sort(x):  # [B, H, Lp, ...] -> [B, H, R, Lp, ...] in each round's sorted order
      x = jnp.broadcast_to(x[:, :, None], (batch, heads, self.n_hashes) + x.shape[2:])
      idx = order.reshape(order.shape + (1,) * (x.ndim - 4))
      return jnp.take_along_axis(x, idx, axis=3)

    s_q, s_k, s_v = sort(q32), sort(keys), sort(v32)
    s_bucket = jnp.take_along_axis(buckets, order, axis=-1)
    s_keep = sort(keep)
    s_index = jnp.broadcast_to(jnp.arange(padded), order.shape)  # position in sorted order

    n_chunks = padded // c
    def chunks(x):  # [B, H, R, Lp, ...] -> [B, H, R, n, c, ...]
      return x.reshape(x.shape[:3] + (n_chunks, c) + x.shape[4:])
    # Distinct neighbouring chunks only: with 1 or 2 chunks a roll would repeat one.
    offsets = (0,) if n_chunks == 1 else (-1, 0) if causal or n_chunks == 2 else (-1, 0, 1)
    def window(x):  # keys of the neighbouring chunks: [B, H, R, n, len(offsets) * c, ...]
      x = chunks(x)
      return jnp.concatenate([jnp.roll(x, -o, axis=3) for o in offsets], axis=4)

    q_c = chunks(s_q)
    logits = jnp.einsum("bhrnqd,bhrnkd->bhrnqk", q_c, window(s_k)) / jnp.sqrt(jnp.float32(d))
    distance = chunks(s_index)[..., :, None] - window(s_index)[..., None, :]  # query - key
    visible = ((chunks(s_bucket)[..., :, None] == window(s_bucket)[..., None, :])
               & window(s_keep)[..., None, :]
               & ((distance >= 0) & (distance <= c) if causal else jnp.abs(distance) <= c))
    logits = jnp.where(distance == 0, _SELF, logits)
    logits = jnp.where(visible | (distance == 0), logits, -jnp.inf)  # a masked token sees itself
    lse = jax.nn.logsumexp(logits, axis=-1)  # [B, H, R, n, c]
    probs = jnp.exp(logits - lse[..., None])
    out = jnp.einsum("bhrnqk,bhrnkd->bhrnqd", probs, window(s_v))
    out = out.reshape(batch, heads, self.n_hashes, padded, d)
    lse = lse.reshape(batch, heads, self.n_hashes, padded)

    out = jnp.take_along_axis(out, undo[..., None], axis=3)  # back to positions
    lse = jnp.take_along_axis(lse, undo, axis=3)
    weights = jax.nn.softmax(lse, axis=2)[..., None]  # combine the rounds
    out = jnp.sum(weights * out, axis=2)  # [B, H, Lp, d]
    return out.transpose(0, 2, 1, 3)[:, :length].astype(v.dtype)
