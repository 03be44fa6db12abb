"""Fig. 15 right (App. D.2): Fig. 5's fine-tunes zoomed out, the trig run's whole curve from 0.

Reads the same fine-tuned run folders as Fig. 5 (`figure backward-compat`); never recomputes."""

import os

import matplotlib.pyplot as plt

from performer.errors import UserError
from performer.figures import runs
from performer.figures.backward_compat import COLOURS, VARIANTS, variant
from performer.figures.curves import STYLES, curve, step_axis
from performer.figures.io import check_figure_path, figure_format, save_figure

NAME = "trig-full"  # performer figure NAME
SUMMARY = "Fig. 15 right: Fig. 5's trig fine-tune zoomed out, every step from 0 (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "fig15_trig_full.png"  # in the first run's parent folder
TRIG = "Performer trig"


def _panels(loaded):
  """{(data folder, direction): [runs]} of the panels that hold a trig run, runs in Fig. 5's
  order of variants, then by seed."""
  panels = {}
  for run in loaded:
    data = os.path.basename(os.path.normpath(run.config.get("data", {}).get("path", "?")))
    panels.setdefault((data, run.direction), []).append(run)
  order = lambda r: ((VARIANTS + (variant(r),)).index(variant(r)), r.seed)  # noqa: E731
  return {key: sorted(group, key=order) for key, group in panels.items()
          if any(variant(r) == TRIG for r in group)}


def render(run_dirs, out_path):
  """Draws every panel of Fig. 5 that has a trig run, train and validation accuracy of every
  step each run logged, on a y-axis from 0 (Fig. 5 fits its axis to validation).

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format, an unwritable out_path, any runs.load_runs error, or no
      trig fine-tune (Fig. 5's `Performer trig`) among the runs.
  """
  figure_format(out_path)
  panels = _panels(runs.load_runs(run_dirs))
  if not panels:
    raise UserError("no trig fine-tune among the runs (Fig. 5's 'Performer trig'): give the "
                    "runs of `figure backward-compat`")
  check_figure_path(out_path)
  fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False,
                           layout="constrained")
  for ax, ((data, direction), group) in zip(axes.flat, panels.items()):
    top, named = 0.0, set()
    for run in group:
      name = variant(run)
      seeds = sorted(r.seed for r in group if variant(r) == name)
      label = None if name in named else f"{name}, seeds {', '.join(map(str, seeds))}"
      named.add(name)
      for split, style in STYLES.items():
        steps, values = curve(run, split, "accuracy")
        if not values:
          continue
        top = max(top, max(values))
        if run.diverged_at is not None:
          ax.plot(steps[-1:], values[-1:], "x", color=COLOURS.get(name, "C7"), markersize=9,
                  label=f"{name}, seed {run.seed}: NaN at step {run.diverged_at}")
        ax.plot(steps, values, color=COLOURS.get(name, "C7"), linestyle=style,
                linewidth=2.2 if name == TRIG else 1.0, alpha=1.0 if name == TRIG else 0.6,
                label=label if split == "valid" else None)
    ax.set_ylim(0, 1.05 * top or 1.0)
    step_axis(ax, "fine-tuning step")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{data} {runs.DIRECTIONS[direction]}: every step, y-axis from 0", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
  fig.suptitle("Fig. 15 right: Fig. 5 zoomed out (trig bold; validation solid, train dashed)",
               fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
