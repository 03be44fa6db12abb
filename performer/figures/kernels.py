"""Fig. 16 (App. D.3): generalized-attention kernels on TrEMBL, accuracy against step, log-log.

Reads Performer runs (each kernel with and without D^-1); identity attention is the control."""

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from performer import attention, favor
from performer.errors import UserError
from performer.figures import runs
from performer.figures.curves import SCORED, STYLES, curve, seed_band, seed_curves
from performer.figures.io import check_figure_path, figure_format, save_figure

NAME = "kernels"  # performer figure NAME
SUMMARY = "Fig. 16 accuracy of generalized-attention kernels, log-log, NaN stops (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "fig16_kernels.png"  # in the first run's parent folder

def options(run):
  """The run's attention options as it used them: the backend's defaults (attention.info)
  overlaid with its model.attention_options."""
  return attention.options(run.attention, (run.config.get("model") or {}).get("attention_options"))


def kernel_of(run):
  """The feature kernel of a Performer run: its recorded sweep value `kernel`, else its options'
  kernel, else the backend's default.

  Raises:
    UserError: the run's backend has no feature kernel (not a Performer), or the kernel is
      unknown.
  """
  if "kernel" not in options(run):
    with_kernel = [n for n in attention.names() if "kernel" in attention.info(n).defaults]
    raise UserError(f"{run.path}: attention {run.attention!r} has no feature kernel; give "
                    f"{' or '.join(with_kernel)} runs")
  kernel = run.setting("kernel", options(run)["kernel"])
  if kernel not in favor.KERNELS:
    raise UserError(f"{run.path}: unknown kernel {kernel!r}; known: {', '.join(favor.KERNELS)}")
  return kernel


def renormalized(run):
  """Whether the run divides by D (App. D.3): its recorded sweep value, else its options'."""
  return run.setting("renormalize", options(run).get("renormalize", True))


def _row(run):
  """A curve family of the figure: the kernel, and whether D^-1 was on."""
  return kernel_of(run), renormalized(run)


def one_direction(loaded):
  """The direction ("U" or "B") all runs share.

  Raises:
    UserError: (U) and (B) runs mixed: their accuracies are scored differently.
  """
  directions = {run.direction for run in loaded}
  if len(directions) > 1:
    first = {d: next(r.path for r in loaded if r.direction == d) for d in directions}
    raise UserError(f"{first['U']} is (U) and {first['B']} is (B): they are scored on different "
                    "positions; give runs of one direction")
  return directions.pop()


def loggable(steps, values):
  """The points a log-log axis can show (step > 0, value > 0)."""
  kept = [(s, v) for s, v in zip(steps, values) if s > 0 and v > 0]
  return [s for s, _ in kept], [v for _, v in kept]


def mark_divergence(ax, run, colour, last_value, *, log_x=False):
  """An 'x' where a NaN stopped `run`, at height last_value; returns its legend text.

  Without a drawn point (stopped before its first log) the 'x' sits at the
  bottom of the panel. On a log x axis step 0 is drawn at 1. Returns None
  for a run that did not diverge.
  """
  step = run.diverged_at
  if step is None:
    return None
  x = max(step, 1) if log_x else step
  if last_value is None:
    ax.plot([x], [0.03], marker="x", color=colour, markersize=9, markeredgewidth=2,
            linestyle="none", transform=ax.get_xaxis_transform(), label=f"{run.name} NaN")
  else:
    ax.plot([x], [last_value], marker="x", color=colour, markersize=9, markeredgewidth=2,
            linestyle="none", label=f"{run.name} NaN")
  return f"NaN at step {step}"


def _labels(loaded):
  """{run path: legend label}: the kernel, and the folder name where kernels repeat."""
  rows = [_row(run) for run in loaded]
  return {run.path: favor.kernel(k).label + ("" if on else " without D^-1")
          + (f" ({run.name})" if rows.count((k, on)) > 1 else "")
          for run, (k, on) in zip(loaded, rows)}


ZOOM_POINTS = 1.0  # the right panel shows the kernels within this many points of the best


def _zoom_on_the_best(ax, finals):
  """Linear y-range of the kernels whose last validation accuracy is within ZOOM_POINTS of the
  best: the differences a claim among good kernels is about, which log axes flatten."""
  ax.set_xlabel("step")
  ax.set_ylabel("validation accuracy (%)")
  ax.grid(True, alpha=0.3)
  if not finals:
    return
  best = max(finals)
  close = [f for f in finals if f >= best - ZOOM_POINTS]
  low, high = min(close), best
  pad = max(0.1, 0.25 * (high - low))
  ax.set_ylim(low - 2 * pad, high + pad)
  ax.set_title(f"zoom: kernels within {ZOOM_POINTS:g} point of the best at the end", fontsize=10)


def render(run_dirs, out_path):
  """Reads Performer run folders and writes Fig. 16 to out_path.

  Args:
    run_dirs: `performer train` workdirs of performer_relu / performer_softmax
      runs, typically one per kernel (model.attention_options kernel).
    out_path: the image; its extension names the format (png without one).

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format, an unwritable out_path, any
      runs.load_runs error, a run that is neither a Performer nor identity
      attention, (U) and (B) runs mixed, or no accuracy row and no
      divergence in any run.
  """
  figure_format(out_path)
  loaded = runs.load_runs(run_dirs)
  controls = [r for r in loaded if r.attention == "identity"]
  direction = one_direction(loaded)
  loaded = [r for r in loaded if r.attention != "identity"]
  labels = _labels(loaded)
  order = sorted(loaded, key=lambda r: (favor.KERNELS.index(kernel_of(r)), not renormalized(r)))
  check_figure_path(out_path)
  fig, (ax, zoom) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained",
                                 gridspec_kw={"width_ratios": (3, 2)})
  drawn, handles, finals = _kernel_curves(ax, zoom, order, labels)
  for kernel, on in dict.fromkeys(map(_row, order)):
    group = [r for r in order if _row(r) == (kernel, on)]
    steps, values = seed_curves(group, "valid", "accuracy")
    seed_band(zoom, steps, values, favor.kernel(kernel).colour, alpha=0.15)
  for run in controls:
    steps, values = loggable(*curve(run, "valid", "accuracy"))
    for axis in (ax, zoom):
      axis.plot(steps, values, color="k", linestyle="-.", linewidth=1.4)
    drawn += bool(steps)
  if controls:
    handles.append(Line2D([], [], color="k", linestyle="-.",
                          label="identity attention (control), validation"))
  if not drawn:
    plt.close(fig)
    raise UserError(f"{', '.join(run_dirs)}: no train or valid rows with accuracy in "
                    "metrics.jsonl, and no diverged.json")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel("accuracy (%)")
  ax.set_title(f"{SCORED[direction]}; validation solid (dotted, squares: without D^-1), train "
               "dashed; x: stopped by a NaN", fontsize=10)
  ax.grid(True, which="both", alpha=0.3)
  handles += [Line2D([], [], color="0.3", linestyle="--", label="train"),
              Line2D([], [], color="0.3", linestyle="-", marker="o", markersize=4,
                     label="validation")]
  baseline = runs.mean(r.value("test", "baseline_accuracy") for r in loaded)
  if baseline is not None:
    for axis in (ax, zoom):
      axis.axhline(100 * baseline, color="0.5", linestyle=":", linewidth=1.2)
    handles.append(Line2D([], [], color="0.5", linestyle=":",
                          label=f"empirical baseline, test ({100 * baseline:.3g})"))
  _zoom_on_the_best(zoom, finals)
  fig.legend(handles=handles, fontsize=7, loc="outside right upper")
  fig.suptitle("Generalized attention kernels (Fig. 16 style): left log-log as the paper,\n"
               "right validation of the best kernels on linear axes", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path


def _kernel_curves(ax, zoom, order, labels):
  """Each run's train and valid accuracy (the first run of a row bold, its seeds lighter; without
  D^-1 dotted with squares), its valid curve on the zoom too; returns (curves drawn, legend
  handles, final valid accuracies)."""
  drawn, handles, seen, finals = 0, [], [], []
  for run in order:
    colour = favor.kernel(kernel_of(run)).colour
    label, ends = labels[run.path], []
    width, alpha = (1.8, 1.0) if _row(run) not in seen else (1.0, 0.55)
    seen.append(_row(run))
    valid_style, marker = ("-", "o") if renormalized(run) else (":", "s")
    for split, style in STYLES.items():
      steps, values = loggable(*curve(run, split, "accuracy"))
      if not steps:
        continue
      valid = split == "valid"
      ax.plot(steps, values, color=colour, linestyle=valid_style if valid else style,
              linewidth=width if valid else 0.9, alpha=alpha if valid else 0.6 * alpha,
              marker=marker if valid else None, markersize=2 * width, label=f"{label} {split}")
      drawn += 1
      ends.append((steps[-1], valid, values[-1]))
      if valid:
        zoom.plot(steps, values, color=colour, linestyle=valid_style, linewidth=width,
                  alpha=alpha, marker=marker, markersize=2 * width)
        finals.append(values[-1])
    # The 'x' continues the curve that got furthest (validation on a tie).
    nan = mark_divergence(ax, run, colour, max(ends)[2] if ends else None, log_x=True)
    drawn += nan is not None
    handles.append(Line2D([], [], color=colour, linestyle=valid_style, linewidth=width,
                          alpha=alpha, marker="x" if nan else marker,
                          label=label + (f": {nan}" if nan else "")))
  return drawn, handles, finals
