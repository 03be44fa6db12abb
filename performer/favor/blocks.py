"""The layout of FAVOR's passes: input checks, and [B, L, H, e] arrays read in blocks.

Heads stay inside a block and move in front only there (`heads_first`)."""

import jax
import jax.numpy as jnp


def check_inputs(q, k, v, mask, causal):
  """ValueError unless q, k, v are float [B, L, H, d] arrays that fit together, L >= 1 and d >= 1,
  and mask is None or [B, Lk] bool."""
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
    raise ValueError("q, k, v must be [batch, length, heads, head_dim], got "
                     f"shapes {q.shape}, {k.shape}, {v.shape}")
  check_float(q=q, k=k, v=v)
  if q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
    raise ValueError(f"q {q.shape} and k {k.shape} disagree on batch, heads or d")
  if k.shape[:3] != v.shape[:3]:
    raise ValueError(f"k {k.shape} and v {v.shape} disagree on batch, length or heads")
  if causal and q.shape[1] != k.shape[1]:
    raise ValueError(f"causal attention needs Lq == Lk, got {q.shape[1]} and {k.shape[1]}")
  # Empty sequences would divide by a block length of 0, or average no keys.
  if q.shape[1] == k.shape[1] == 0:
    raise ValueError("q, k, v have length L = 0; need L >= 1")
  if q.shape[1] == 0:
    raise ValueError(f"q has length Lq = 0; need Lq >= 1 (k, v: Lk = {k.shape[1]})")
  if k.shape[1] == 0:
    raise ValueError(f"k, v have length Lk = 0; need Lk >= 1 (q: Lq = {q.shape[1]})")
  if q.shape[-1] == 0:
    raise ValueError("q and k have head_dim d = 0; need d >= 1")
  if mask is not None and tuple(mask.shape) != tuple(k.shape[:2]):
    raise ValueError(f"mask must be [batch, Lk] = {k.shape[:2]}, got {mask.shape}")
  check_mask(mask)


def check_float(**arrays):
  """ValueError naming the first of `arrays` (name=array) whose dtype is not floating.

  Outputs take v's dtype, so an integer v would round them silently; integer q and k are refused
  alike, so that a caller casts once.
  """
  for name, x in arrays.items():
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} has dtype {x.dtype}; attention needs floating-point q, k and v")


def check_mask(mask):
  """ValueError unless mask is None or bool: a float mask would read any nonzero value as "keep"."""
  if mask is not None and mask.dtype != bool:
    raise ValueError(f"mask has dtype {mask.dtype}; it must be bool (True = real token)")


def blocks(x, block):
  """[B, L, H, e] -> [n, B, block, H, e], zero-padded to n * block >= L."""
  batch, length, heads, e = x.shape
  n = -(-length // block)
  x = jnp.pad(x, [(0, 0), (0, n * block - length), (0, 0), (0, 0)])
  return jnp.moveaxis(x.reshape(batch, n, block, heads, e), 1, 0)


def mask_blocks(mask, block):
  """[B, L] bool -> [n, B, 1, block]: the key mask read as `blocks` reads the keys."""
  return blocks(mask[:, :, None, None], block)[..., 0, 0][:, :, None]


def unblock(x, length):
  """[n, B, block, H, e] -> [B, length, H, e]: the inverse of `blocks`."""
  n, batch, block, heads, e = x.shape
  return jnp.moveaxis(x, 0, 1).reshape(batch, n * block, heads, e)[:, :length]


def heads_first(x):
  """[B, C, H, e] -> [B, H, C, e] inside a block (in cache), and back."""
  return jnp.swapaxes(x, 1, 2)


def scan(f, carry, xs):
  """lax.scan over the leading (block) axis, or one plain call for a single block: no loop."""
  if jax.tree.leaves(xs)[0].shape[0] > 1:
    return jax.lax.scan(f, carry, xs)
  carry, y = f(carry, jax.tree.map(lambda x: x[0], xs))
  return carry, jax.tree.map(lambda x: x[None], y)
