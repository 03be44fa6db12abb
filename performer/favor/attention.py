"""FAVOR (random-feature) attention, Eq. (4); causal via App. B.1: checks arguments, picks the pass.

Stabilization is exact: shifts of the feature logs cancel in D (docs/ARCHITECTURE.md, numerics)."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from performer.favor import bidirectional, blocks, exponential, features, fused as fused_lib
from performer.favor import kernels, numerics
from performer.favor import causal as causal_pass


class Form(NamedTuple):
  """The block lengths one platform runs FAVOR with (tokens, Python ints).

  block: bidirectional keys and queries are read in blocks of this length.
  chunk: causal C, the length of the masked quadratic parts.
  span: causal tokens per loop step, a multiple of C (C: one chunk per step).
  batch_tokens: sequences of at most this length are read a group at a time,
    the largest divisor of B with at most this many tokens per loop step;
    longer ones, and 0, the whole batch at once.
  batch_bytes: by default, only a batch whose float32 features (B L H M
    values) pass this many bytes is read in groups; a smaller one stays in
    cache whole. An explicit batch_tokens groups any batch.
  fused: the fused kernels (fused.py) instead of the XLA forms, for the kernels they compute;
    they read blocks of `chunk` tokens in both directions.
  """
  block: int
  chunk: int
  span: int
  batch_tokens: int = 0
  batch_bytes: int = 0
  fused: bool = False


# By jax.default_backend(); platforms not listed take "gpu"'s. Each is the fastest form measured
# on that platform: results/pages/speed_cpu.md, "One attention layer" (block and chunk lengths)
# and "The targets" (batch groups); results/pages/speed_gpu.md, "Loop-free forms". The fused
# kernels are chosen nowhere yet: on the CPU they run in Pallas' interpret mode (for tests), and
# on a GPU they await the measurement scripts/gpu_check.sh makes beside the XLA forms.
FORMS = {
    "cpu": Form(block=512, chunk=128, span=128, batch_tokens=256, batch_bytes=4 << 20),
    "gpu": Form(block=262144, chunk=64, span=65536),
}


def form(platform=None):
  """The `Form` FAVOR runs with on `platform` (default: jax.default_backend())."""
  return FORMS.get(platform or jax.default_backend(), FORMS["gpu"])


def favor_attention(q, k, v, W, *, kernel="positive", causal=False, mask=None,
                    chunk_size=None, span=None, batch_tokens=None, scale=None, kernel_epsilon=0.0,
                    statistics=None, renormalize=True, fused=None):
  """FAVOR attention: D^-1 (Q' ((K')^T V)), Eq. (4); causal via App. B.1.

  Args:
    q: [B, Lq, H, d]; k: [B, Lk, H, d]; v: [B, Lk, H, dv]; any float dtype;
      Lq, Lk, d >= 1.
    W: [m, d] from `projection` (m >= 1); None only for generalized kernels.
    kernel: one of `kernels.KERNELS` (`positive` is FAVOR+; `gerf` FAVOR++;
      `derf`, `saderf` FAVOR#, see exponential.py).
    causal: unidirectional attention (needs Lq == Lk), computed chunk by
      chunk: masked quadratic attention inside a chunk plus a running
      K'^T V and K'^T 1 state; never forms an L x L or L x m x dv tensor.
    mask: [B, Lk] bool key padding mask (True = real token) or None. Padded
      keys enter neither the numerator nor D.
    chunk_size: the causal chunk length C or the bidirectional block length
      (default `form()`'s chunk or block); L need not be a multiple of it.
      Changes speed, not results (beyond float rounding). A Python int.
    span: causal only: tokens computed at once per loop step, rounded up to
      a multiple of C (default `form()`'s span; C: the sequential pass;
      >= L: no loop). A Python int; changes speed and memory, not results
      (beyond float rounding).
    batch_tokens: sequences of at most this length are read in groups of
      whole sequences with at most this many tokens (0: the whole batch at
      once; default `form()`'s, for batches past its batch_bytes); a Python
      int, speed only, like span.
    scale: factor applied to q and k before the feature map, a Python or
      array scalar (may be traced); default d^(-1/4), so softmax kernels
      estimate exp(q.k / sqrt(d)).
    kernel_epsilon: see `features.feature_parts`; a Python or array scalar.
    statistics: for a data-dependent kernel, (query, key)
      `exponential.Moments` of scaled queries and keys, leading dims [H] or
      [B, H], from which its parameters are built. None: bidirectional
      attention takes them from this sequence's real tokens (queries: those
      the mask keeps when Lq == Lk, else all); causal attention refuses,
      because statistics of the sequence would let outputs see later tokens.
    fused: True computes it with the fused Pallas kernels (fused.py; the
      same results up to float rounding, gradients by the XLA form's
      recomputation), False with the XLA forms; None: the platform's
      `form()`, for the kernels the fused ones compute.

  Returns:
    [B, Lq, H, dv] in v's dtype (features and sums in float32). A query
    whose normaliser D is exactly 0 (e.g. relu features all zero) gets 0.
    Under jit, NaN where a scaled norm passes `MAX_NORM` or a query or real
    key holds NaN or Inf (see Raises; they are checked only eagerly).

  Raises:
    ValueError: inconsistent shapes, Lq, Lk or d = 0, q, k or v not of a
      floating dtype, a mask not bool, unknown kernel, missing W or W with
      m = 0 rows, chunk_size or span < 1, statistics missing for a causal
      data-dependent kernel or given for another kernel, renormalize False
      with an exponential kernel, fused True with a data-dependent kernel; for concrete (not
      traced) inputs and an exponential kernel, a query or real key holding
      NaN or Inf, or whose scaled norm |x| d^(-1/4) exceeds `MAX_NORM`.
  """
  blocks.check_inputs(q, k, v, mask, causal)
  numerics.check_renormalize(kernel, renormalize)
  for name, value, least in (("chunk_size", chunk_size, 1), ("span", span, 1),
                             ("batch_tokens", batch_tokens, 0)):
    if value is not None and not (isinstance(value, int) and value >= least):
      raise ValueError(f"{name} must be a Python int >= {least}, got {value!r}")
  data_dependent = kernel in kernels.DATA_DEPENDENT_KERNELS
  if statistics is not None and not data_dependent:
    raise ValueError(f"kernel {kernel!r} takes no statistics (only "
                     f"{', '.join(kernels.DATA_DEPENDENT_KERNELS)} do)")
  if data_dependent and causal and statistics is None:
    raise ValueError(f"causal {kernel!r} attention needs statistics from outside the sequence "
                     "(running averages); the sequence's own would let outputs see later tokens")
  features.feature_parts(jnp.zeros((1, q.shape[-1])), W, kernel,  # argument errors, early
                         params=exponential.identity(q.shape[-1]) if data_dependent else None)
  scale = jnp.asarray(q.shape[-1] ** -0.25 if scale is None else scale, jnp.float32)
  if mask is None:
    mask = jnp.ones(k.shape[:2], bool)
  concrete = not any(isinstance(x, jax.core.Tracer) for x in (q, k, mask, scale))
  if kernel in kernels.EXPONENTIAL_KERNELS and concrete:
    numerics.check_norms(q, k, mask, scale)
  lengths, length = form(), max(q.shape[1], k.shape[1])
  if fused and not fused_lib.supports(kernel):
    raise ValueError(f"the fused kernels do not compute the data-dependent kernel {kernel!r}")
  fused = bool(lengths.fused and fused_lib.supports(kernel) if fused is None else fused)
  if causal:
    chunk = min(chunk_size or lengths.chunk, q.shape[1])
    block = (chunk, span or max(lengths.span, chunk))
  else:
    block = (min(chunk_size or (lengths.chunk if fused else lengths.block), length), None)
  if batch_tokens is None:  # the platform's, for batches whose features leave the cache
    m = q.shape[3] if W is None else W.shape[0]  # generalized kernels map each of d coordinates
    whole = 4 * q.shape[0] * length * q.shape[2] * m <= lengths.batch_bytes
    batch_tokens = 0 if whole else lengths.batch_tokens
  group = q.shape[0] if fused else _group(q.shape[0], length, batch_tokens)  # kernel: a grid
  return _favor(q, k, v, W, mask, scale, jnp.asarray(kernel_epsilon, jnp.float32), statistics,
                kernel=kernel, causal=causal, block=block, group=group, renormalize=renormalize,
                fused=fused)


def _group(batch, length, batch_tokens):
  """Sequences per loop step over the batch (`Form.batch_tokens`); batch: no loop."""
  if not batch_tokens or length > batch_tokens:  # longer: its features leave the cache anyway
    return batch
  return max(g for g in range(1, min(batch, batch_tokens // length) + 1) if batch % g == 0)


# Compiled once per shape and setting, so that eager calls do not retrace the scans.
@functools.partial(jax.jit, static_argnames=("kernel", "causal", "block", "group",
                                             "renormalize", "fused"))
def _favor(q, k, v, W, mask, scale, kernel_epsilon, statistics, *, kernel, causal, block, group,
           renormalize, fused):
  with jax.default_matmul_precision("float32"):  # not TF32 (a GPU's default): logs need float32
    dtype = v.dtype
    q_params = k_params = None
    if kernel in kernels.DATA_DEPENDENT_KERNELS:
      if statistics is None:  # bidirectional: this sequence's real tokens
        q_mask = mask if q.shape[1] == k.shape[1] else None
        statistics = (exponential.moments(q * scale, q_mask), exponential.moments(k * scale, mask))
      q_params, k_params = (_per_sequence(side, q.shape[0], q.shape[2])
                            for side in exponential.parameters(kernel, *statistics))
    operand_dtype = jnp.bfloat16 if dtype == jnp.bfloat16 else jnp.float32
    xla = functools.partial(_favor_float32, kernel=kernel, causal=causal, block=block,
                            renormalize=renormalize, operand_dtype=operand_dtype)
    if fused:  # data-independent kernels: no parameters
      setting = fused_lib.Setting(kernel, causal, block[0], jnp.dtype(operand_dtype).name,
                                  renormalize)
      return fused_lib.attend(xla, setting, q, k, v, mask, W, scale,
                              kernel_epsilon).astype(dtype)
    attend = lambda *args: xla(*args[:4], W, scale, kernel_epsilon, *args[4:])
    args = (q, k, v, mask, q_params, k_params)
    if group < q.shape[0]:  # a loop over groups of sequences; each group's features stay in cache
      split = lambda x: x.reshape((q.shape[0] // group, group) + x.shape[1:])
      out = jax.lax.map(lambda xs: attend(*xs), jax.tree.map(split, args))
      out = out.reshape((q.shape[0],) + out.shape[2:])
    else:
      out = attend(*args)
    return out.astype(dtype)


def _favor_float32(q, k, v, mask, W, scale, kernel_epsilon, q_params=None, k_params=None, *,
                   kernel, causal, block, operand_dtype, renormalize):
  """FAVOR of the sequences given (a batch, or a group of it): [B, Lq, H, dv] float32."""
  featurize = functools.partial(numerics.featurize, W=W, kernel=kernel, scale=scale,
                                kernel_epsilon=kernel_epsilon)
  featurize_q = functools.partial(featurize, params=q_params)
  featurize_k = functools.partial(featurize, params=k_params)
  if causal:
    return causal_pass.causal(q, k, v, mask, featurize_q, featurize_k, *block, operand_dtype,
                              renormalize)
  return bidirectional.bidirectional(q, k, v, mask, featurize_q, featurize_k, block[0],
                                     operand_dtype, renormalize)


def _per_sequence(side, batch, heads):
  """A Side of leading dims [H] or [B, H] broadcast to [B, H] (a block's [B, H, C, d])."""
  return exponential.Side(
      jnp.broadcast_to(side.transform, (batch, heads) + side.transform.shape[-2:]),
      jnp.broadcast_to(side.A, (batch, heads) + side.A.shape[-1:]))

