"""Lemma 2 / Fig. 2 (Sec. 2.3, 3): trigonometric against positive random features.

Symmetrized: l < 0 means the pair (-x, -y), phi < 0 mirrors y in e1; neither changes r(phi, l)."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import tqdm

from performer import favor, memory
from performer.errors import UserError
from performer.experiments import results
from performer.experiments.results import Result
from performer.flags import flag
from performer.favor import theory

KERNELS = ("trig", "positive")
# Beyond this expected relative standard error the Monte Carlo MSE is too
# skewed (heavy tails) for a normal z-score to mean anything.
RELIABLE_REL_SE = 0.2
_BATCH = 4096  # draws of W per vectorised step (their keys and estimates: 12 bytes a draw)


NAME = "lemma2"
SUMMARY = "trig vs positive random features for the softmax kernel (Fig. 2, Lemma 2)"
DESCRIPTION = ("Writes to a JSON file the closed-form ratio r = MSE(trig) / MSE(positive) of "
               "Lemma 2 over a grid of angles phi in [-pi, pi] and signed lengths l (|x| = |y| = "
               "|l|; negative l is the pair (-x, -y)), and, on the slice l = --slice-length, both "
               "closed-form MSEs beside Monte Carlo estimates over independent draws of an iid W.")
OUT = "runs/lemma2.json"
FIGURE = "lemma2"


@dataclasses.dataclass(frozen=True)
class Lemma2Config:
  """What to compute. Defaults run in about half a minute on 2 CPU cores.

  dim = 2: with iid Gaussian rows w, (w.x, w.y) is a centred Gaussian pair
    whose covariance is the Gram matrix of x and y, so the estimator's whole
    distribution (and both closed forms) is the same for every d >= 2; d = 2
    is the smallest that holds every angle and the cheapest. (Orthogonal
    features would depend on d; Lemma 2 is about iid ones.)
  features m = 128: both MSEs are exactly 1/m times a single feature's
    variance, so r does not depend on m; m only sets the Monte Carlo noise,
    whose relative variance is (2 + (kurtosis - 3) / m) / samples. The
    positive feature's kurtosis is ~ exp(4 |x + y|^2): ~3,900 at phi = pi/2,
    l = 1, where m = 128 brings the relative error of 20,000 draws to ~4%.
  """
  dim: int = flag(2, "dimension d of x, y and of W's rows (with iid W nothing depends on "
                     "d >= 2 but the cost)")
  features: int = flag(128, "random features m (r does not depend on m, the Monte Carlo "
                            "noise does)")
  angles: int = flag(144, "grid cells in phi over [-pi, pi], even (2.5 degrees each)")
  lengths: int = flag(100, "grid cells in l over [-max-length, max-length], even")
  max_length: float = flag(2.0, "half-width of the grid in l, at most 5 (the paper's 2)")
  slice_length: float = flag(1.0, "l of the slice, at most 2 (the paper's 1)")
  slice_angles: int = flag(36, "slice points phi = k pi / N, k = 0 .. N-1")
  samples: int = flag(20_000, "independent draws of W per Monte Carlo point")
  low_kernel_angle: float = flag(3 * math.pi / 4, "the low-kernel region is phi >= this, in "
                                 "radians", shown="3pi/4 = 2.356")
  seed: int = flag(0, "PRNG seed")

  def __post_init__(self):
    # Messages name the `performer lemma2` flag of each field.
    for name, value, low in (("--dim", self.dim, 2), ("--features", self.features, 1),
                             ("--samples", self.samples, 2),
                             ("--slice-angles", self.slice_angles, 2),
                             ("--angles", self.angles, 2), ("--lengths", self.lengths, 2)):
      if value < low:
        raise UserError(f"{name} must be >= {low}, got {value}")
    for name, value, what in (("--angles", self.angles, "phi = 0, where r = 0"),
                              ("--lengths", self.lengths, "l = 0, where r = 0/0")):
      if value % 2:
        raise UserError(f"{name} must be even, so that no grid cell centre falls on {what}; "
                        f"got {value}")
    for name, value, high in (("--max-length", self.max_length, 5.0),  # exp(6 l^2) < 1e308
                              ("--slice-length", self.slice_length, 2.0)):
      if not (math.isfinite(value) and 0 < value <= high):
        raise UserError(f"{name} must be in (0, {high:g}], got {value}")
    if not 0 < self.low_kernel_angle < math.pi:
      raise UserError(f"--low-kernel-angle must be in (0, pi), got {self.low_kernel_angle}")
    if not 0 <= self.seed < 2 ** 31 - 1:
      raise UserError(f"--seed must be in [0, 2^31 - 1), got {self.seed}")


CONFIG = Lemma2Config


def pair(phi, l, d=2):
  """The vectors x = l e1, y = l (cos phi e1 + sin phi e2) in R^d.

  Args:
    phi: [...] angles in radians; l: [...] lengths (negative: both flipped).
    d: dimension, >= 2.

  Returns:
    (x, y): [..., d] float64 each (broadcast shape of phi and l).
  """
  phi, l = np.broadcast_arrays(np.asarray(phi, np.float64), np.asarray(l, np.float64))
  x, y = np.zeros(phi.shape + (d,)), np.zeros(phi.shape + (d,))
  x[..., 0] = l
  y[..., 0], y[..., 1] = l * np.cos(phi), l * np.sin(phi)
  return x, y


def utility(phi, l):
  """r = MSE(trig) / MSE(positive) of Lemma 2 at angle phi, length l.

  Args:
    phi, l: broadcastable float arrays (radians; any sign, see the module
      docstring for the symmetrization).

  Returns:
    [...] float64; inf at phi = +-pi (x = -y), nan at l = 0 (both MSEs 0).
  """
  x, y = pair(phi, l)
  with np.errstate(divide="ignore", invalid="ignore"):
    return (theory.softmax_kernel_mse(x, y, 1, "trig")
            / theory.softmax_kernel_mse(x, y, 1, "positive"))


def crossing_angle(l):
  """The angle phi* in (0, pi) where r(phi*, l) = 1; r > 1 for phi > phi*."""
  return scipy.optimize.brentq(lambda p: float(utility(p, l)) - 1.0, 0.0, math.pi * (1 - 1e-9),
                               xtol=1e-13)


def feature_moments(kernel, x, y):
  """Variance and fourth central moment of one feature's term of the estimator.

  The m-feature estimator is the mean of m iid terms X: exp(w.(x+y) -
  (|x|^2 + |y|^2)/2) for `positive` (lognormal), exp((|x|^2 + |y|^2)/2)
  cos(w.(x-y)) for `trig`, w ~ N(0, I_d). Their mean is SM(x, y) = exp(x.y)
  and MSE = variance / m (Lemma 2).

  Args:
    kernel: `positive` or `trig`.
    x, y: [..., d] float arrays.

  Returns:
    (variance, fourth central moment): [...] float64 each.
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if kernel == "positive":
    mean = np.exp(np.sum(x * y, -1))
    # X / mean = exp(G - s/2), G ~ N(0, s), so E[(X / mean)^k] = exp(k (k - 1) s / 2).
    s = np.sum((x + y) ** 2, -1)
    return (mean ** 2 * np.expm1(s),
            mean ** 4 * (np.exp(6 * s) - 4 * np.exp(3 * s) + 6 * np.exp(s) - 3))
  if kernel == "trig":
    c = np.exp(0.5 * (np.sum(x * x, -1) + np.sum(y * y, -1)))
    q = np.exp(-0.5 * np.sum((x - y) ** 2, -1))  # E[cos(jG)] = q^(j^2), G ~ N(0, |x - y|^2)
    return (c ** 2 * np.expm1(-np.sum((x - y) ** 2, -1)) ** 2 / 2,
            c ** 4 * (3 / 8 - 5 / 2 * q ** 4 + 3 * q ** 6 - q ** 10 + q ** 16 / 8))
  raise ValueError(f"feature_moments covers positive and trig, not {kernel!r}")


def mc_standard_error(kernel, x, y, m, samples):
  """Exact standard error of the mean squared error over `samples` independent draws.

  With S = (estimate - SM)^2 for one draw of m features, E[S] = var / m and
  Var[S] = 2 var^2 / m^2 + (mu4 - 3 var^2) / m^3 (var, mu4 from
  `feature_moments`).

  Returns:
    [...] float64 sqrt(Var[S] / samples); inf where it overflows float64.
  """
  var, mu4 = feature_moments(kernel, x, y)
  with np.errstate(over="ignore", invalid="ignore"):
    var_s = 2 * var ** 2 / m ** 2 + (mu4 - 3 * var ** 2) / m ** 3
  return np.sqrt(np.maximum(var_s, 0.0) / samples)


@functools.partial(jax.jit, static_argnames=("kernel", "m"))
def _estimates(keys, x, y, *, kernel, m):
  """[n] float32 estimates phi(x).phi(y), one iid W ([m, d]) per key."""
  def one(key):
    W = favor.projection(key, m, x.shape[-1], "iid")  # [m, d]
    return favor.feature_map(x, W, kernel) @ favor.feature_map(y, W, kernel)
  return jax.lax.map(one, keys, batch_size=_BATCH)


def monte_carlo(kernel, x, y, m, samples, key):
  """Mean squared error of feature_map(x) . feature_map(y) against exp(x.y).

  Args:
    kernel: `positive` or `trig`; x, y: [d] float arrays; m: features;
    samples: independent draws of W; key: a jax.random key.

  Returns:
    (mse, sample standard error of the mean): floats (errors in float64 from
    float32 estimates).
  """
  est = _estimates(jax.random.split(key, samples), jnp.asarray(x, jnp.float32),
                   jnp.asarray(y, jnp.float32), kernel=kernel, m=m)
  sq = (np.asarray(est, np.float64) - math.exp(float(np.dot(x, y)))) ** 2
  return float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(samples))


def _cells(n, half_width):
  """Centres of n equal cells on [-half_width, half_width]."""
  return -half_width + (np.arange(n) + 0.5) * (2 * half_width / n)


def _slice_rows(cfg, progress):
  l, m = cfg.slice_length, cfg.features
  phis = np.arange(cfg.slice_angles) * math.pi / cfg.slice_angles
  rows = []
  bar = tqdm.tqdm(total=len(phis) * len(KERNELS), desc="lemma2 Monte Carlo", unit="point",
                  disable=not progress)
  for i, phi in enumerate(phis):
    x, y = pair(phi, l, cfg.dim)
    row = {"phi": float(phi), "l": l, "kernel_value": math.exp(float(x @ y)),
           "low_kernel": bool(phi >= cfg.low_kernel_angle - 1e-12)}  # k pi / N vs 3pi/4
    for j, kernel in enumerate(KERNELS):
      exact = float(theory.softmax_kernel_mse(x, y, m, kernel))
      key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), j), i)
      mc, se = monte_carlo(kernel, x, y, m, cfg.samples, key)
      se_exact = float(mc_standard_error(kernel, x, y, m, cfg.samples))
      ok = math.isfinite(se_exact) and se_exact > 0
      row.update({f"mse_{kernel}": exact, f"mc_{kernel}": mc, f"mc_{kernel}_se": se,
                  f"mc_{kernel}_se_exact": se_exact if math.isfinite(se_exact) else None,
                  f"mc_{kernel}_z": (mc - exact) / se_exact if ok else None,
                  f"mc_{kernel}_reliable": ok and se_exact <= RELIABLE_REL_SE * exact})
      bar.update()
    row["r"] = row["mse_trig"] / row["mse_positive"]
    rows.append(row)
  bar.close()
  return rows


def _agreement(rows):
  """Per kernel: how many points the z-test covers and how far MC is from Lemma 2."""
  out = {}
  for kernel in KERNELS:
    z = np.abs([r[f"mc_{kernel}_z"] for r in rows if r[f"mc_{kernel}_reliable"]])
    out[kernel] = {"points": len(rows), "reliable_points": int(z.size),
                   "median_abs_z": float(np.median(z)) if z.size else None,
                   "max_abs_z": float(np.max(z)) if z.size else None,
                   "within_3_se": int(np.sum(z <= 3))}
  return out


def run(cfg, *, progress=True):
  """Computes the grid, the slice and the low-kernel numbers.

  Returns:
    Result(rows, extra): rows are the slice points (dicts: phi, l, kernel_value,
    mse_trig, mse_positive, r, and per kernel mc_K, mc_K_se (sample),
    mc_K_se_exact, mc_K_z, mc_K_reliable; low_kernel); extra holds `grid`
    (phi [A], l [N], r [N][A]: r[i][j] at l[i], phi[j]), `curve` (a fine
    closed-form slice), `key_angles`, `low_kernel`, `agreement` and
    `symmetrization`.

  Raises:
    UserError: the grid or a batch of W's features would not fit in memory.
  """
  # A few float64 [N, A] arrays for the grid; _BATCH draws of W and their features at a time.
  memory.check_fits(4 * 8 * cfg.angles * cfg.lengths,
                    f"--angles {cfg.angles} x --lengths {cfg.lengths}: the r grid")
  memory.check_fits(4 * _BATCH * cfg.features * (cfg.dim + 2),
                    f"--features {cfg.features} x --dim {cfg.dim}: {_BATCH} draws of W at a time")
  memory.check_fits(12 * cfg.samples + 8 * cfg.slice_angles,  # a key and an estimate per draw
                    f"--samples {cfg.samples}, --slice-angles {cfg.slice_angles}: the draws")
  phi, l = _cells(cfg.angles, math.pi), _cells(cfg.lengths, cfg.max_length)
  grid = utility(phi[None, :], l[:, None])  # [N, A]
  if not np.all(np.isfinite(grid) & (grid > 0)):
    raise AssertionError("r left (0, inf) on cell centres")  # a bug, not user input
  rows = _slice_rows(cfg, progress)

  ls = cfg.slice_length
  fine = np.linspace(0.0, math.pi, 257)[:-1]
  fx, fy = pair(fine, ls)
  curve = {"phi": fine.tolist(),
           "mse_trig": theory.softmax_kernel_mse(fx, fy, cfg.features, "trig").tolist(),
           "mse_positive": theory.softmax_kernel_mse(fx, fy, cfg.features, "positive").tolist(),
           "r": utility(fine, ls).tolist()}
  key_angles = []
  for label, angle in (("0", 0.0), ("pi/2", math.pi / 2), ("3pi/4", 3 * math.pi / 4)):
    kx, ky = pair(angle, ls)
    key_angles.append({"label": label, "phi": angle, "l": ls, "r": float(utility(angle, ls)),
                       "kernel_value": math.exp(float(kx @ ky)),
                       **{f"mse_{k}": float(theory.softmax_kernel_mse(kx, ky, cfg.features, k))
                          for k in KERNELS}})
  star = crossing_angle(ls)
  low = [r for r in rows if r["low_kernel"]]
  low_kernel = {
      "from_angle": cfg.low_kernel_angle, "l": ls, "points": len(low),
      "crossing_angle": star, "kernel_at_crossing": math.exp(ls * ls * math.cos(star)),
      "r_min": min((r["r"] for r in low), default=None),
      "r_max": max((r["r"] for r in low), default=None),
      "mse_trig_mean": float(np.mean([r["mse_trig"] for r in low])) if low else None,
      "mse_positive_mean": float(np.mean([r["mse_positive"] for r in low])) if low else None,
      "mc_trig_mean": float(np.mean([r["mc_trig"] for r in low])) if low else None,
      "mc_positive_mean": float(np.mean([r["mc_positive"] for r in low])) if low else None,
      "grid_fraction_r_above_1": float(np.mean(grid > 1)),
  }
  extra = {
      "grid": {"phi": phi.tolist(), "l": l.tolist(), "r": grid.tolist()},
      "curve": curve, "key_angles": key_angles, "low_kernel": low_kernel,
      "agreement": _agreement(rows),
      "symmetrization": "r(phi, l) = r(-phi, l) = r(phi, -l) = r(-phi, -l): negative l is the "
                        "pair (-x, -y), negative phi mirrors y; x.y, |x+y|, |x-y| unchanged",
  }
  return Result(rows, extra)


def report(cfg, result):
  """The lines `performer lemma2` prints: r at key angles, the crossing, MC agreement."""
  extra = result.extra
  l = cfg.slice_length
  cells = ", ".join(f"phi={a['label']}: {a['r']:.4g}" for a in extra["key_angles"])
  low = extra["low_kernel"]
  lines = [f"r = MSE(trig) / MSE(positive) at l = {l:g} (Lemma 2, any m): {cells}",
           (f"r = 1 at phi* = {low['crossing_angle']:.4f} rad, where SM(x, y) = "
            f"{low['kernel_at_crossing']:.3g}: positive features are more accurate beyond it; "
            f"r > 1 on {100 * low['grid_fraction_r_above_1']:.1f}% of the (phi, l) grid")]
  if low["points"]:
    lines.append(
        f"low-kernel region phi >= {low['from_angle']:.4g} ({low['points']} points): r from "
        f"{low['r_min']:.4g} to {low['r_max']:.4g}; mean MSE trig {low['mse_trig_mean']:.3g}, "
        f"positive {low['mse_positive_mean']:.3g} (Monte Carlo {low['mc_trig_mean']:.3g}, "
        f"{low['mc_positive_mean']:.3g})")
  lines.append(f"Monte Carlo vs Lemma 2 (d={cfg.dim}, m={cfg.features}, {cfg.samples} draws of W "
               "per point; z = (MC - closed form) / exact s.e.):")
  for kernel, a in extra["agreement"].items():
    numbers = (f", median |z| {a['median_abs_z']:.2f}, max |z| {a['max_abs_z']:.2f}, "
               f"{a['within_3_se']} within 3 s.e." if a["reliable_points"] else "")
    lines.append(f"  {kernel}: {a['reliable_points']} of {a['points']} points testable{numbers}")
  lines.append(f"  (untestable: exact s.e. above {RELIABLE_REL_SE:.0%} of the MSE, a heavy-tailed "
               "mean, or MSE 0 where the estimator is exact)")
  return lines


FLAGS, main = results.command(__name__)  # what every experiment command does
