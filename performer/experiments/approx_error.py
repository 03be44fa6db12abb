"""Approximation error of FAVOR attention against exact softmax (paper Fig. 4).

MSE over L x d outputs per sample, a fresh W per sample, for each kernel/projection kind and m."""

import dataclasses
import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from performer import favor, memory
from performer.errors import UserError
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag

# (kernel, projection kind, scaling): the paper's curves, H-/G-ORF, then what came after it.
DEFAULT_VARIANTS = (
    ("positive", "orthogonal", "chi"),
    ("positive", "iid", "chi"),
    ("trig", "orthogonal", "chi"),
    ("trig", "iid", "chi"),
    ("hyperbolic", "orthogonal", "chi"),
    ("hyperbolic", "iid", "chi"),
    ("positive", "orthogonal", "sqrt_d"),  # SMREG
    ("positive", "hadamard", "chi"),
    ("positive", "givens", "chi"),
    ("positive", "simplex", "chi"),
    ("gerf", "orthogonal", "chi"),
    ("derf", "orthogonal", "chi"),
    ("saderf", "orthogonal", "chi"),
)
ESTIMATOR_KERNELS = favor.SOFTMAX_KERNELS + favor.DATA_DEPENDENT_KERNELS


NAME = "approx_error"
SUMMARY = "MSE of FAVOR attention against exact softmax (Fig. 4)"
DESCRIPTION = ("Sweeps the number of random features m for each kernel/projection variant and "
               "input scale, and writes MSE statistics over samples to a JSON file. q, k entries "
               "~ N(0, s^2/sqrt(d)) for input scale s (--anisotropy: spread unevenly over "
               "directions), v ~ N(0, 1). Kernels: the paper's positive, hyperbolic and trig, and "
               "the later data-dependent estimators gerf (FAVOR++), derf and saderf (FAVOR#).")
OUT = "runs/approx_error.json"  # the committed one is results/approx_error.json
FIGURE = "mse-vs-m"


def parse_variants(text):
  """'positive/orthogonal/chi,trig/iid/chi' -> tuple of triples (UserError if malformed)."""
  if not text.strip():
    raise UserError("--variants is empty")
  variants = []
  for item in text.split(","):
    parts = tuple(item.strip().split("/"))
    if len(parts) != 3:
      raise UserError(f"variant {item!r} must read kernel/projection/scaling, "
                      "e.g. positive/orthogonal/chi")
    variants.append(parts)
  return tuple(variants)


@dataclasses.dataclass(frozen=True)
class ApproxErrorConfig:
  """What to sweep. Defaults: the paper's Fig. 4 (L=4096, d=16, 15 samples).

  variants: None means DEFAULT_VARIANTS, without hadamard when d is not a
    power of two.
  """
  seq_len: int = flag(4096, "sequence length L")
  dim: int = flag(16, "head dimension d")
  features: tuple[int, ...] = flag((16, 32, 64, 128, 256), "comma-separated values of m")
  samples: int = flag(15, "random draws per point")
  anisotropy: float = flag(1.0, "ratio r of the largest to the smallest per-coordinate standard "
                           "deviation of q and k (keys in reverse order, both under a random "
                           "rotation); 1: isotropic, as Fig. 4")
  seed: int = flag(0, "PRNG seed")
  input_scales: tuple[float, ...] = flag(
      (0.5, 1.0, 1.5, 2.0), "comma-separated input scales s; one figure row each",
      name="--input-scale")
  variants: tuple[tuple[str, str, str], ...] | None = flag(
      None, "comma-separated kernel/projection/scaling triples, e.g. "
      "positive/orthogonal/chi,trig/iid/chi", parse=parse_variants,
      shown="the paper's curves, hyperbolic, SMREG, H-ORF, G-ORF, simplex, FAVOR++ (gerf) and "
      "FAVOR# (derf, saderf)")

  def __post_init__(self):
    # Messages name the `performer approx-error` flag of each field.
    for name, value in (("--seq-len", self.seq_len), ("--dim", self.dim),
                        ("--samples", self.samples)):
      if value < 1:
        raise UserError(f"{name} must be >= 1, got {value}")
    if not 0 <= self.seed < 2 ** 31 - 1:
      raise UserError(f"--seed must be in [0, 2^31 - 1), got {self.seed}")
    if not self.features or min(self.features) < 1:
      raise UserError(f"--features must be counts m >= 1, got "
                      f"{','.join(map(str, self.features)) or 'nothing'}")
    if not (math.isfinite(self.anisotropy) and self.anisotropy >= 1):
      raise UserError(f"--anisotropy must be a finite ratio >= 1, got {self.anisotropy:g}")
    if not self.input_scales or not all(math.isfinite(s) and s > 0 for s in self.input_scales):
      raise UserError(f"--input-scale values must be finite and > 0, got "
                      f"{','.join(f'{s:g}' for s in self.input_scales)}")
    if self.variants is None:
      object.__setattr__(self, "variants", tuple(
          v for v in DEFAULT_VARIANTS if (v[1] != "hadamard" or not self.dim & (self.dim - 1))
          and (v[1] != "simplex" or self.dim > 1)))
    if not self.variants:
      raise UserError("--variants: no variants given")
    # Input draws are keyed by the scale in thousandths (see _inputs).
    for name, values, hint in (
        ("--features", self.features, ""), ("--variants", self.variants, ""),
        ("--input-scale", [round(s * 1000) for s in self.input_scales],
         " (values must differ by >= 0.001)")):
      if len(set(values)) != len(values):
        raise UserError(f"{name} values must not repeat{hint}")
    for kernel, kind, scaling in self.variants:
      if kernel not in ESTIMATOR_KERNELS:
        raise UserError(f"--variants: kernel {kernel!r} is not a softmax kernel; "
                        f"choose from {', '.join(ESTIMATOR_KERNELS)}")
      if kind not in favor.KINDS:
        raise UserError(f"--variants {kernel}/{kind}/{scaling}: unknown projection {kind!r}; "
                        f"choose from {', '.join(favor.KINDS)}")
      if scaling not in favor.SCALINGS:
        raise UserError(f"--variants {kernel}/{kind}/{scaling}: unknown scaling {scaling!r}; "
                        f"choose from {', '.join(favor.SCALINGS)}")
      if kind == "hadamard" and self.dim & (self.dim - 1):
        raise UserError(f"hadamard projections need --dim a power of two, got {self.dim}")
      if kind == "simplex" and self.dim < 2:
        raise UserError(f"simplex projections need --dim >= 2, got {self.dim}")


CONFIG = ApproxErrorConfig


@jax.jit
def _exact(q, k, v):
  return favor.softmax_attention(q, k, v)


@jax.jit
def _squared_errors(q, k, v, W_by_kernel, exact):
  """Per-kernel MSE of FAVOR against `exact`, one jit for all kernels."""
  return {kernel: jnp.mean((favor.favor_attention(q, k, v, W, kernel=kernel) - exact) ** 2)
          for kernel, W in W_by_kernel.items()}


def _inputs(cfg, scale, sample):
  key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), sample),
                           int(round(scale * 1000)))
  kq, kk, kv = jax.random.split(key, 3)
  shape = (1, cfg.seq_len, 1, cfg.dim)
  std = scale * cfg.dim ** -0.25
  q, k, v = (std * jax.random.normal(kq, shape), std * jax.random.normal(kk, shape),
             jax.random.normal(kv, shape))
  if cfg.anisotropy == 1.0:
    return q, k, v
  spread = cfg.anisotropy ** (jnp.linspace(0.0, 1.0, cfg.dim) - 0.5)
  spread = spread / jnp.sqrt(jnp.mean(spread ** 2))  # E|x|^2 unchanged
  rotation = favor.projection(jax.random.fold_in(key, 1), cfg.dim, cfg.dim, "orthogonal", "sqrt_d")
  rotation = rotation / jnp.sqrt(cfg.dim)  # rows of norm 1: an orthogonal matrix
  return q * spread @ rotation, k * spread[::-1] @ rotation, v


def projection_for(cfg, variant, m, sample):
  """The W used for (variant, m, sample): a stable key from crc32 of the variant."""
  _, kind, scaling = variant
  key = jax.random.fold_in(jax.random.key(cfg.seed + 1), zlib.crc32("/".join(variant).encode()))
  key = jax.random.fold_in(jax.random.fold_in(key, m), sample)
  return favor.projection(key, m, cfg.dim, kind, scaling)


def check_norms(cfg):
  """Refuses input scales whose scaled queries or keys pass favor.MAX_NORM.

  Past it the softmax kernels' features (all exponential) overflow float32
  and FAVOR gives NaN (favor_attention); the sweep would write NaN rows.

  Raises:
    UserError: naming the first such scale and its largest norm.
  """
  for scale in cfg.input_scales:
    largest = max(float(jnp.max(jnp.linalg.norm(t[0, :, 0], axis=-1))) * cfg.dim ** -0.25
                  for i in range(cfg.samples) for t in _inputs(cfg, scale, i)[:2])
    if largest > favor.MAX_NORM:
      raise UserError(f"--input-scale {scale:g}: scaled queries and keys reach |x| = "
                      f"{largest:.4g}, past favor.MAX_NORM = {favor.MAX_NORM:g}, where the "
                      "softmax kernels' features overflow float32; use smaller scales")


def run(cfg, *, progress=True):
  """Runs the sweep. Returns a Result whose rows are one per (scale, variant, m).

  Raises:
    UserError: see `check_norms` (checked before the sweep); the exact
      attention's L x L matrices (float32) do not fit in memory.
  """
  memory.check_fits(2 * 4 * cfg.seq_len ** 2, f"--seq-len {cfg.seq_len}: exact attention's "
                    "L x L scores and logits")
  memory.check_fits(4 * (max(cfg.features) + 3 * cfg.seq_len) * cfg.dim
                    + 4 * cfg.seq_len * max(cfg.features),
                    f"--features {max(cfg.features)} x --dim {cfg.dim} at --seq-len "
                    f"{cfg.seq_len}: W, q, k, v and the features")
  check_norms(cfg)
  errors = {}  # (scale, variant, m) -> [mse per sample]
  norms = {}  # scale -> [mean |x| of scaled queries and keys, logit std]
  steps = [(s, i) for s in cfg.input_scales for i in range(cfg.samples)]
  for scale, sample in tqdm.tqdm(steps, desc="approx-error", unit="sample", disable=not progress):
    q, k, v = _inputs(cfg, scale, sample)
    x, y = q[0, :, 0] * cfg.dim ** -0.25, k[0, :, 0] * cfg.dim ** -0.25
    norms.setdefault(scale, []).append(
        (float(jnp.mean(jnp.linalg.norm(x, axis=-1))), float(jnp.mean(jnp.linalg.norm(y, axis=-1))),
         float(jnp.std(x @ y.T))))
    exact = _exact(q, k, v)
    for m in cfg.features:
      by_projection = {}  # (kind, scaling) -> {kernel: W}
      for variant in cfg.variants:
        kernel, kind, scaling = variant
        by_projection.setdefault((kind, scaling), {})[kernel] = projection_for(cfg, variant, m, sample)
      for (kind, scaling), W_by_kernel in by_projection.items():
        for kernel, mse in _squared_errors(q, k, v, W_by_kernel, exact).items():
          errors.setdefault((scale, (kernel, kind, scaling), m), []).append(float(mse))

  rows = []
  for (scale, (kernel, kind, scaling), m), mses in errors.items():
    stats = np.asarray(norms[scale])
    rows.append({
        "kernel": kernel, "projection": kind, "scaling": scaling, "m": m,
        "mse_mean": float(np.mean(mses)), "mse_std": float(np.std(mses)),
        "mse_median": float(np.median(mses)), "mse_min": float(np.min(mses)),
        "mse_max": float(np.max(mses)), "samples": len(mses),
        "L": cfg.seq_len, "d": cfg.dim, "seed": cfg.seed, "input_scale": scale,
        "anisotropy": cfg.anisotropy,
        "query_norm_mean": float(stats[:, 0].mean()), "key_norm_mean": float(stats[:, 1].mean()),
        "logit_std": float(stats[:, 2].mean()),
    })
  return Result(rows)


def report(cfg, result):
  """The lines `performer approx-error` prints: median MSE at the largest m per scale."""
  m_max = max(cfg.features)
  lines = [f"median MSE at m={m_max} (L={cfg.seq_len}, d={cfg.dim}, {cfg.samples} samples):"]
  for scale in cfg.input_scales:
    cells = [f"{r['kernel']}/{r['projection']}/{r['scaling']}={r['mse_median']:.2e}"
             for r in result.rows if r["input_scale"] == scale and r["m"] == m_max]
    lines.append(f"  input scale {scale:g}: " + ", ".join(cells))
  return lines


FLAGS, main = results.command(__name__)  # what every experiment command does
