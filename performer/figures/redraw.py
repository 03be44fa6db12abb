"""Fig. 15 left and middle (App. D.2): redrawing softmax features, and softmax against ReLU."""

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

from performer import attention
from performer.errors import UserError
from performer.figures import curves, runs
from performer.figures.io import check_figure_path, figure_format, save_figure
from performer.figures.kernels import kernel_of, mark_divergence, one_direction, options

NAME = "redraw"  # performer figure NAME
SUMMARY = "Fig. 15 softmax features with/without redrawing; softmax vs ReLU (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "fig15_redraw.png"  # in the first run's parent folder

NO_REDRAW_COLOURS = ("C3", "C1", "C6", "C5", "C8")
REDRAW_COLOURS = ("C0", "C2", "C9", "C4", "C7")
LEFT = "positive softmax features: never redrawn vs redrawn, by feature seed"
RIGHT = "positive softmax (redrawn) vs generalized ReLU"


def redraw_every(run):
  """A run's redraw period in steps (0: never redrawn), from its options (what it did)."""
  return options(run)["redraw_every"]


def feature_seed(run):
  """The seed of a run's random features W: its recorded sweep value feature_seed, else its
  attention_options seed (a run trained by hand); not TrainConfig.seed."""
  return run.setting("feature_seed", options(run)["seed"])


def _sort(loaded):
  """(softmax runs, relu runs), each by (redraw, feature seed, train seed).

  Raises:
    UserError: a run in neither panel (another attention or kernel).
  """
  softmax, relu = [], []
  for run in loaded:
    kernel = kernel_of(run)
    if run.attention == "performer_softmax" and kernel == "positive":
      softmax.append(run)
    elif run.attention == "performer_relu" and kernel == "relu":
      relu.append(run)
    else:
      raise UserError(f"{run.path}: {run.attention} with {kernel} features is in neither panel "
                      f"of Fig. 15 (left: {LEFT}; right: {RIGHT})")
  key = lambda r: (redraw_every(r) != 0, redraw_every(r), feature_seed(r), r.seed)
  return sorted(softmax, key=key), sorted(relu, key=key)


def _setting(run):
  every = redraw_every(run)
  return ("redraw every step" if every == 1 else f"redraw every {every}") if every else "no redraw"


def _draw(ax, run, colour, label, width=1.8, alpha=1.0):
  """Validation (solid, markers) and train (dashed) curves plus the NaN 'x'; returns a handle."""
  ends = []
  for split, style in curves.STYLES.items():
    steps, values = curves.curve(run, split, "accuracy")
    if steps:
      valid = split == "valid"
      ax.plot(steps, values, color=colour, linestyle=style, alpha=alpha if valid else 0.6 * alpha,
              linewidth=width if valid else 0.6 * width, marker="o" if valid else None,
              markersize=2 * width, label=f"{label} {split}")
      ends.append((steps[-1], valid, values[-1]))
  nan = mark_divergence(ax, run, colour, max(ends)[2] if ends else None)
  return Line2D([], [], color=colour, linewidth=width, alpha=alpha, marker="x" if nan else None,
                label=label + (f": {nan}" if nan else ""))


def _left(ax, softmax):
  train_seeds = len({r.seed for r in softmax}) > 1
  handles, used = [], {0: 0, 1: 0}
  for run in softmax:
    redraws = redraw_every(run) != 0
    palette = REDRAW_COLOURS if redraws else NO_REDRAW_COLOURS
    colour = palette[used[redraws] % len(palette)]
    used[redraws] += 1
    label = f"feature seed {feature_seed(run)}, {_setting(run)}" + (
        f", train seed {run.seed}" if train_seeds else "")
    handles.append(_draw(ax, run, colour, label))
  return handles


def _right(ax, softmax, relu):
  handles = []
  for model, group in (("Performer-softmax", [r for r in softmax if redraw_every(r)]),
                       ("Performer-ReLU", relu)):
    for i, run in enumerate(group):
      detail = f"positive, {_setting(run)}, " if model == "Performer-softmax" else ""
      label = f"{model} ({detail}feature seed {feature_seed(run)}, train seed {run.seed})"
      width, alpha = (1.8, 1.0) if i == 0 else (1.0, 0.55)
      handles.append(_draw(ax, run, attention.colour(run.attention), label, width, alpha))
  return handles


def render(run_dirs, out_path):
  """Reads Performer run folders and writes the Fig. 15 panels they make to out_path.

  Left needs performer_softmax (positive) runs with redraw_every 0 and with
  redraw_every > 0; right needs a redrawing one and a performer_relu (relu)
  run. A panel whose runs are missing is left out.

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format, an unwritable out_path, any
      runs.load_runs error, (U) and (B) runs mixed, a run in neither panel,
      or runs that complete neither panel.
  """
  figure_format(out_path)
  loaded = runs.load_runs(run_dirs)
  direction = one_direction(loaded)
  softmax, relu = _sort(loaded)
  has_redraw = any(redraw_every(r) for r in softmax)
  left = has_redraw and any(not redraw_every(r) for r in softmax)
  right = has_redraw and bool(relu)
  if not (left or right):
    missing = ", ".join(name for name, absent in (
        ("a redrawing performer_softmax run", not has_redraw),
        ("one with redraw_every = 0", not any(not redraw_every(r) for r in softmax)),
        ("a performer_relu run", not relu)) if absent)
    raise UserError(f"{', '.join(run_dirs)}: these runs make neither panel of Fig. 15; add "
                    f"{missing}")
  check_figure_path(out_path)
  panels = [p for p, wanted in ((LEFT, left), (RIGHT, right)) if wanted]
  fig, axes = plt.subplots(1, len(panels), figsize=(7.0 * len(panels), 4.6), squeeze=False,
                           layout="constrained")
  for ax, panel in zip(axes[0], panels):
    handles = _left(ax, softmax) if panel == LEFT else _right(ax, softmax, relu)
    handles += [Line2D([], [], color="0.3", linestyle="--", label="train"),
                Line2D([], [], color="0.3", marker="o", markersize=4, label="validation")]
    ax.set_title(panel, fontsize=10)
    curves.step_axis(ax)
    ax.set_ylabel("accuracy (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=1, borderaxespad=0)  # below the panel: beside, two panels would not fit
  fig.suptitle(f"Redrawing features (Fig. 15 style), {curves.SCORED[direction]}; x: stopped by "
               "a NaN", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
