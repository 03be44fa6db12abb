"""Random projection matrices W ([m, d]) for random-feature attention (Sec. 2.3-2.4, App. B.2)."""

import functools
import math

import jax
import jax.numpy as jnp

KINDS = ("iid", "orthogonal", "hadamard", "givens", "simplex")
SCALINGS = ("chi", "sqrt_d")


def projection(key, m, d, kind="orthogonal", scaling="chi"):
  """Draws the random projection W whose rows are the feature directions w_i.

  Args:
    key: one `jax.random` key: jax.random.key(seed), or a legacy uint32
      key of shape (2,). The same key always gives the same matrix.
    m: number of random features (rows), >= 1.
    d: dimension of queries and keys (columns), >= 1.
    kind: `iid` (independent N(0, I_d) rows); `orthogonal` (R-ORF: blocks of
      d exactly orthogonal rows, from the QR decomposition of a Gaussian
      matrix with signs fixed so each block is Haar-distributed; blocks are
      stacked while m > d and the last one is truncated when d does not
      divide m); `hadamard` (H-ORF: each block is H D3 H D2 H D1 with
      H the normalised Hadamard matrix and Di random sign diagonals; needs d
      a power of two); `givens` (G-ORF: each block is a product of
      d * ceil(log2 d) random Givens rotations); `simplex` (SimRFs: each
      block's d unit directions are the vertices of a regular simplex,
      pairwise dot product -1/(d - 1), under a Haar-random rotation; needs
      d >= 2). Structured kinds (hadamard, givens) are slightly biased, the
      bias vanishing as d grows (App. B.2); every row of the others is
      marginally an iid row.
    scaling: `chi` (each row's norm is drawn like a Gaussian row's norm,
      chi(d), so orthogonal rows keep the marginals of iid ones and the
      softmax estimator stays unbiased) or `sqrt_d` (every row has norm
      sqrt(d): the regularized softmax kernel SMREG, Sec. 2.3).

  Returns:
    W: [m, d] float32.

  Raises:
    TypeError: key is not one jax.random key (e.g. a plain int seed).
    ValueError: m or d < 1, an unknown kind or scaling, `hadamard` with d
      not a power of two, or `simplex` with d = 1.
  """
  _check_key(key)
  if m < 1 or d < 1:
    raise ValueError(f"projection needs m >= 1 and d >= 1, got m={m}, d={d}")
  if kind not in KINDS:
    raise ValueError(f"unknown projection kind {kind!r}; choose from {KINDS}")
  if scaling not in SCALINGS:
    raise ValueError(f"unknown projection scaling {scaling!r}; choose from {SCALINGS}")
  if kind == "hadamard" and d & (d - 1):
    raise ValueError(f"hadamard projections need d a power of two, got d={d}")
  if kind == "simplex" and d < 2:
    raise ValueError("simplex projections need d >= 2 (a simplex of d directions spans d - 1)")

  dir_key, norm_key = jax.random.split(key)
  if kind == "iid":
    w = jax.random.normal(dir_key, (m, d), jnp.float32)
    if scaling == "chi":
      return w
    return w * (math.sqrt(d) / jnp.linalg.norm(w, axis=1, keepdims=True))

  block_fn = {"orthogonal": _orthogonal_block, "hadamard": _hadamard_block,
              "givens": _givens_block, "simplex": _simplex_block}[kind]
  n_blocks = -(-m // d)
  # One batched draw, not a block per op: the same blocks (the same key each), in one QR call
  # rather than m / d (and givens: one loop, where m = 1,024, d = 16 took minutes to compile).
  blocks = jax.vmap(lambda k: block_fn(k, d))(jax.random.split(dir_key, n_blocks))
  unit = blocks.reshape(n_blocks * d, d)[:m]  # [m, d], rows of norm 1
  if scaling == "sqrt_d":
    norms = jnp.full((m, 1), math.sqrt(d), jnp.float32)
  else:
    gauss = jax.random.normal(norm_key, (m, d), jnp.float32)
    norms = jnp.linalg.norm(gauss, axis=1, keepdims=True)  # [m, 1] ~ chi(d)
  return unit * norms


def _check_key(key):
  """TypeError unless key is one typed key or one legacy uint32 key of shape (2,) (static: works
  under jit)."""
  dtype, shape = getattr(key, "dtype", None), tuple(getattr(key, "shape", (None,)))
  typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
  if (typed and shape == ()) or (not typed and dtype == jnp.uint32 and shape == (2,)):
    return
  got = (f"an array of dtype {dtype} and shape {shape}" if dtype is not None
         else f"{type(key).__name__} {key!r:.40}")
  raise TypeError(f"projection needs one jax.random key, got {got}; pass jax.random.key(seed)")


def _orthogonal_block(key, d):
  """A Haar-distributed [d, d] orthogonal matrix (QR of a Gaussian matrix)."""
  g = jax.random.normal(key, (d, d), jnp.float32)
  q, r = jnp.linalg.qr(g)
  # Without the sign fix, QR's convention makes Q non-uniform (Mezzadri 2007).
  return (q * jnp.sign(jnp.diag(r))[None, :]).T


def _simplex_block(key, d):
  """d unit rows s_i R with s_i . s_j = -1/(d - 1) (a regular simplex), R Haar: [d, d].

  s_i = sqrt(d / (d - 1)) (e_i - 1/d): unit norm, summing to 0.
  """
  simplex = math.sqrt(d / (d - 1)) * (jnp.eye(d, dtype=jnp.float32) - 1.0 / d)
  return simplex @ _orthogonal_block(key, d)


def _hadamard_block(key, d):
  """H D3 H D2 H D1 with H the normalised Hadamard matrix: [d, d], orthogonal."""
  h = jnp.ones((1, 1), jnp.float32)
  while h.shape[0] < d:  # Sylvester construction
    h = jnp.block([[h, h], [h, -h]])
  h = h / math.sqrt(d)
  signs = jax.random.rademacher(key, (3, d), jnp.float32)
  block = jnp.eye(d, dtype=jnp.float32)
  for s in signs:
    block = h @ (s[:, None] * block)
  return block


@functools.partial(jax.jit, static_argnums=1)  # eager fori_loop re-traces every call
def _givens_block(key, d):
  """A product of d * ceil(log2 d) random Givens rotations ([d, d], orthogonal)."""
  if d == 1:
    return jax.random.rademacher(key, (1, 1), jnp.float32)
  n_rot = d * max(1, math.ceil(math.log2(d)))
  k_i, k_j, k_theta = jax.random.split(key, 3)
  i = jax.random.randint(k_i, (n_rot,), 0, d)
  j = (i + jax.random.randint(k_j, (n_rot,), 1, d)) % d  # j != i
  theta = jax.random.uniform(k_theta, (n_rot,), jnp.float32, 0.0, 2 * math.pi)

  def rotate(t, g):
    c, s = jnp.cos(theta[t]), jnp.sin(theta[t])
    gi, gj = g[i[t]], g[j[t]]
    return g.at[i[t]].set(c * gi - s * gj).at[j[t]].set(s * gi + c * gj)

  return jax.lax.fori_loop(0, n_rot, rotate, jnp.eye(d, dtype=jnp.float32))
