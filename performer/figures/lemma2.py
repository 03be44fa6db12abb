"""Fig. 2 (Sec. 2.3, Lemma 2): trig against positive random features, from a lemma2 result file."""

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

from performer import favor
from performer.errors import UserError
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "lemma2"  # performer figure NAME
SUMMARY = "Fig. 2 MSE ratio r of trig to positive features (--input lemma2 JSON)"

REQUIRED = {"phi": float, "l": float, "kernel_value": float, "mse_trig": float,
            "mse_positive": float, "r": float, "mc_trig": float, "mc_trig_se": float,
            "mc_positive": float, "mc_positive_se": float}
CLIP = 6.0  # colour scale of log10 r saturates beyond +-CLIP decades


def _arrays(record, path, field, keys):
  """record[field][key] as float64 arrays, each finite; UserError naming what is wrong."""
  block = record.get(field)
  if not isinstance(block, dict) or any(k not in block for k in keys):
    raise UserError(f"{path}: `{field}` must hold {', '.join(keys)}")
  out = {}
  for k in keys:
    try:
      out[k] = np.asarray(block[k], np.float64)
    except (TypeError, ValueError):
      raise UserError(f"{path}: {field}.{k} is not an array of numbers") from None
    if not out[k].size or not np.all(np.isfinite(out[k])):
      raise UserError(f"{path}: {field}.{k} is empty or not finite")
  return out


def _grid(record, path):
  grid = _arrays(record, path, "grid", ("phi", "l", "r"))
  if grid["r"].shape != (grid["l"].size, grid["phi"].size):
    raise UserError(f"{path}: grid.r has shape {grid['r'].shape}, expected "
                    f"[len(l), len(phi)] = [{grid['l'].size}, {grid['phi'].size}]")
  if np.any(grid["r"] <= 0):
    raise UserError(f"{path}: grid.r holds values <= 0 (no logarithm)")
  return grid


def _angle_axis(ax, low, high):
  ticks = [k * math.pi / 4 for k in range(-4, 5) if low - 1e-9 <= k * math.pi / 4 <= high + 1e-9]
  names = {-4: "-π", -3: "-3π/4", -2: "-π/2", -1: "-π/4", 0: "0", 1: "π/4", 2: "π/2",
           3: "3π/4", 4: "π"}
  ax.set_xticks(ticks, [names.get(round(t * 4 / math.pi), f"{t:.2f}") for t in ticks])
  ax.set_xlabel("angle φ between x and y (radians)")


def _heatmap(fig, ax, grid, slice_length):
  log_r = np.log10(grid["r"])
  low, high = float(log_r.min()), float(log_r.max())
  norm = TwoSlopeNorm(vcenter=0.0, vmin=min(max(low, -CLIP), -0.1), vmax=max(min(high, CLIP), 0.1))
  mesh = ax.pcolormesh(grid["phi"], grid["l"], log_r, shading="nearest", cmap="RdBu_r", norm=norm)
  if low < 0 < high:
    ax.contour(grid["phi"], grid["l"], log_r, levels=[0.0], colors="k", linewidths=1)
  for sign in (1, -1):
    ax.axhline(sign * slice_length, color="k", linestyle="--", linewidth=0.8)
  fig.colorbar(mesh, ax=ax, label="log10 r = log10(MSE trig / MSE positive)", extend="both")
  _angle_axis(ax, -math.pi, math.pi)
  ax.set_ylabel("length l = |x| = |y| (signed: l < 0 is (-x, -y))")
  ax.set_title("r(φ, l), symmetrized; black: r = 1; dashed: the slice", fontsize=10)


def _mc_points(ax, rows, kernel, label, colour):
  """Monte Carlo means +- one sample standard error (clipped for a log axis)."""
  for reliable in (True, False):
    chosen = [r for r in rows if r.get(f"mc_{kernel}_reliable", True) is reliable
              and r[f"mc_{kernel}"] > 0]
    if not chosen:
      continue
    mean = np.array([r[f"mc_{kernel}"] for r in chosen])
    se = np.array([r[f"mc_{kernel}_se"] for r in chosen])
    ax.errorbar([r["phi"] for r in chosen], mean, yerr=[np.minimum(se, 0.9 * mean), se],
                linestyle="none", marker="o", markersize=4, capsize=2, color=colour,
                markerfacecolor=colour if reliable else "none",
                label=label if reliable else f"{label}, exact s.e. > 20%")


def render(input_path, out_path):
  """Reads a lemma2 JSON file and writes Fig. 2 to out_path (PNG without an extension).

  Raises:
    UserError: the file is missing, not JSON, not a lemma2 result, or lacks
      the row columns above, a valid `grid` or `curve`.
  """
  figure_format(out_path)  # a wrong extension fails first
  record, rows = load_rows(input_path, "lemma2", REQUIRED)
  grid = _grid(record, input_path)
  curve = _arrays(record, input_path, "curve", ("phi", "mse_trig", "mse_positive", "r"))
  check_figure_path(out_path)  # before drawing, not after
  config = record.get("config") if isinstance(record.get("config"), dict) else {}
  low = record.get("low_kernel") if isinstance(record.get("low_kernel"), dict) else {}
  rows = sorted(rows, key=lambda r: r["phi"])
  slice_length = rows[0]["l"]

  fig = plt.figure(figsize=(18, 6), layout="constrained")
  axes = fig.subplot_mosaic([["map", "mse", "r"], ["map", "low", "r"]], width_ratios=(1.25, 1, 1),
                            height_ratios=(2.2, 1))
  _heatmap(fig, axes["map"], grid, slice_length)
  # At phi = 0 the trig estimator is exact (MSE 0): no point on a log axis, and
  # its Monte Carlo value is float32 rounding, not an error of the estimator.
  drawn = [r for r in rows if r["mse_trig"] > 0 and r["mse_positive"] > 0]
  positive = {k: np.where(curve[k] > 0, curve[k], np.nan)  # log axes: 0 is not drawn
              for k in ("mse_trig", "mse_positive", "r")}
  _mse_panel(axes["mse"], curve, positive, drawn, config, slice_length)
  _low_panel(axes["low"], curve, rows, low, slice_length)
  _ratio_panel(axes["r"], curve, positive, drawn, low, slice_length)
  for ax in (axes["mse"], axes["r"]):
    _angle_axis(ax, 0.0, math.pi)
    ax.set_xlim(0.0, math.pi)
    ax.grid(True, which="both", alpha=0.3)
  fig.suptitle("Lemma 2: trigonometric vs positive random features for SM(x, y) = exp(x.y), "
               "|x| = |y| = l, angle φ", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path


def _mse_panel(ax, curve, positive, drawn, config, slice_length):
  """Both estimators' MSE along the slice, Lemma 2's curves and the Monte Carlo points (log)."""
  for kernel in ("trig", "positive"):
    ax.plot(curve["phi"], positive[f"mse_{kernel}"], color=favor.kernel(kernel).colour,
            label=f"{kernel}, Lemma 2")
    _mc_points(ax, drawn, kernel, f"{kernel}, Monte Carlo", favor.kernel(kernel).colour)
  ax.set_yscale("log")
  if drawn:
    ax.set_ylim(bottom=0.3 * min(min(r["mse_trig"], r["mse_positive"]) for r in drawn))
  ax.set_ylabel(f"MSE, m = {config.get('features', '?')} features")
  ax.set_title(f"slice l = {slice_length:g}: MSE of the estimate of exp(x.y); Monte Carlo: "
               f"{config.get('samples') or '?'} draws of iid W (d = {config.get('dim', '?')}), "
               "+-1 s.e.", fontsize=9)
  ax.legend(fontsize=7, loc="lower center", ncols=2)


def _low_panel(ax, curve, rows, low, slice_length):
  """The MSEs on a linear axis where the kernel is small (angles from low's from_angle)."""
  from_angle = low.get("from_angle")
  from_angle = from_angle if isinstance(from_angle, (int, float)) else 0.75 * math.pi
  near = curve["phi"] >= from_angle
  pts = [r for r in rows if r["phi"] >= from_angle]
  for kernel in ("trig", "positive"):
    ax.plot(curve["phi"][near], curve[f"mse_{kernel}"][near], color=favor.kernel(kernel).colour)
    ax.errorbar([r["phi"] for r in pts], [r[f"mc_{kernel}"] for r in pts],
                yerr=[r[f"mc_{kernel}_se"] for r in pts], linestyle="none", marker="o",
                markersize=3, capsize=2, color=favor.kernel(kernel).colour)
  ax.set_ylim(bottom=0)
  ax.set_xlim(from_angle, math.pi)
  ax.set_ylabel("MSE (linear)")
  ax.set_xlabel("angle φ (radians)")
  ax.set_title(f"low kernel values, φ >= {from_angle:.3g}: SM(x, y) <= "
               f"{math.exp(slice_length ** 2 * math.cos(from_angle)):.3g}", fontsize=9)
  ax.grid(True, alpha=0.3)


def _ratio_panel(ax, curve, positive, drawn, low, slice_length):
  """r = MSE trig / MSE positive along the slice, with the angle where it crosses 1."""
  ax.plot(curve["phi"], positive["r"], color="k", label="r, Lemma 2")
  ratio = [(r["phi"], r["mc_trig"] / r["mc_positive"]) for r in drawn
           if r["mc_positive"] > 0 and r["mc_trig"] > 0]
  if ratio:
    ax.plot(*zip(*ratio), linestyle="none", marker="o", markersize=4, markerfacecolor="none",
            color="C2", label="Monte Carlo ratio")
  ax.axhline(1.0, color="grey", linewidth=0.8)
  star = low.get("crossing_angle")
  if isinstance(star, (int, float)):
    sm = low.get("kernel_at_crossing")
    text = f"r = 1 at φ* = {star:.3f}"
    if isinstance(sm, (int, float)):
      text += f" (SM = {sm:.3g})"
    ax.axvline(star, color="grey", linestyle=":", label=text)
  ax.set_yscale("log")
  if drawn:
    ax.set_ylim(bottom=0.3 * min(r["r"] for r in drawn))
  ax.set_ylabel("r = MSE trig / MSE positive (independent of m)")
  ax.set_title(f"r along the slice l = {slice_length:g}: above 1, positive features win",
               fontsize=10)
  ax.legend(fontsize=7, loc="upper left")
