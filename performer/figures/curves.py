"""Fig. 6: training curves of protein runs, train dashed and validation solid.

Reads run folders' metrics.jsonl (runs.py); never recomputes anything."""

import math

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from performer import attention
from performer.errors import UserError
from performer.figures import runs
from performer.figures.io import check_figure_path, figure_format, save_figure

NAME = "curves"  # performer figure NAME
SUMMARY = "Fig. 6 train/validation curves of --metric against step (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "fig6_{metric}.png"  # in the first run's parent folder

METRICS = {"accuracy": "accuracy (%)", "perplexity": "perplexity", "loss": "loss (nats per token)"}
STYLES = {"train": "--", "valid": "-"}
SCORED = {"U": "(U) unidirectional, all positions", "B": "(B) bidirectional, masked positions"}


def check_metric(metric):
  """Raises UserError unless metric is one of METRICS."""
  if metric not in METRICS:
    raise UserError(f"unknown metric {metric!r}; use one of {', '.join(METRICS)}")


def curve(run, split, metric):
  """(steps, values) of one split; accuracy as a percentage."""
  rows = [r for r in run.metrics if r["split"] == split and isinstance(r.get(metric), (int, float))]
  scale = 100 if metric == "accuracy" else 1
  return [r["step"] for r in rows], [scale * r[metric] for r in rows]


def _panel(ax, direction, groups, metric, zoom=False):
  """Draws one direction's runs (zoom: validation alone, no legend or baseline); returns the
  number of lines drawn."""
  drawn, handles, used = 0, [], set()
  present = {attention.colour(g[0].attention) for (d, _), g in groups.items() if d == direction}
  spare = iter([f"C{i}" for i in range(10) if f"C{i}" not in present] + ["0.5"])
  for (d, label), group in groups.items():
    if d != direction:
      continue
    colour = attention.colour(group[0].attention)
    if colour in used:  # another model of the same backend (Fig. 7 right: depths)
      colour = next(spare, "0.5")
    used.add(colour)
    for split in ("valid",) if zoom else STYLES:
      style = STYLES[split]
      steps, values = seed_curves(group, split, metric)  # values [seeds][steps]
      if not steps:
        continue
      mean = [sum(v) / len(v) for v in zip(*values)]
      ax.plot(steps, mean, color=colour, linestyle=style, linewidth=1.8,
              marker="o" if split == "valid" else None, markersize=4,  # markers: few evals
              label=f"{runs.model_label(group[0])} {split}")
      if split == "valid":
        seed_band(ax, steps, values, colour)
      drawn += 1
    seeds = f" (mean of {len(group)} seeds, band: their range)" if len(group) > 1 else ""
    handles.append(Line2D([], [], color=colour, linewidth=1.8,
                          label=label + runs.tag(group[0]) + seeds + diverged(group)))
  if zoom:
    step_axis(ax)
    ax.set_ylabel(METRICS[metric])
    ax.set_title("validation alone, y-range fitted to it", fontsize=9)
    ax.grid(True, alpha=0.3)
    return drawn
  baseline = _baseline(groups, direction, metric)
  if baseline is not None:
    ax.axhline(baseline, color="0.5", linestyle=":", linewidth=1.2)
    handles.append(Line2D([], [], color="0.5", linestyle=":",
                          label=f"empirical baseline, test ({baseline:.3g})"))
  handles += [Line2D([], [], color="0.3", linestyle="--", label="train"),
              Line2D([], [], color="0.3", linestyle="-", marker="o", markersize=4,
                     label="validation")]
  step_axis(ax)
  ax.set_ylabel(METRICS[metric])
  ax.set_title(SCORED[direction], fontsize=10)
  ax.grid(True, alpha=0.3)
  # Under the panel, two columns: inside it covers curves, beside it leaves the zoomed panel
  # below with a blank as wide as the legend.
  ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16),
            ncol=2, borderaxespad=0)
  return drawn


def diverged(group):
  """'; <run> NaN at step S' for each run of `group` that a NaN stopped ('' for none): its curve
  ends there, and a mean over seeds stops at the shortest."""
  return "".join(f"; {run.name} NaN at step {run.diverged_at}" for run in group
                 if run.diverged_at is not None)


def seed_band(ax, steps, values, colour, alpha=0.2):
  """Fills from the lowest to the highest seed at each step (values [seed][step]); nothing for
  one seed."""
  if len(values) > 1:
    ax.fill_between(steps, [min(v) for v in zip(*values)], [max(v) for v in zip(*values)],
                    color=colour, alpha=alpha, linewidth=0)


def seed_curves(group, split, metric):
  """(steps every seed logged, [seed][step] values): one seed's whole curve, else the shared steps."""
  curves = [dict(zip(*curve(run, split, metric))) for run in group]
  curves = [c for c in curves if c]
  if not curves:
    return [], []
  steps = sorted(set.intersection(*(set(c) for c in curves)))
  return steps, [[c[s] for s in steps] for c in curves]


def _baseline(groups, direction, metric):
  """The mean empirical-frequency baseline of a direction's test evals in `metric`'s unit, or None."""
  key = {"accuracy": "baseline_accuracy", "perplexity": "baseline_perplexity",
         "loss": "baseline_perplexity"}[metric]
  value = runs.mean(r.value("test", key) for (d, _), group in groups.items() if d == direction
                    for r in group)
  if value is None:
    return None
  return 100 * value if metric == "accuracy" else math.log(value) if metric == "loss" else value


def step_axis(ax, label="step"):
  """A linear step axis: whole steps only (a run of 3 steps gets no tick at 0.5), at most six
  ticks (more collide: '9001050')."""
  ax.set_xlabel(label)
  ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))


def render(run_dirs, out_path, metric="accuracy"):
  """Reads run folders and writes the figure of `metric` to out_path.

  Args:
    run_dirs: `performer train` workdirs.
    out_path: the image; its extension names the format (png without one).
    metric: "accuracy" (drawn in %), "perplexity" or "loss".

  Returns:
    out_path.

  Raises:
    UserError: an unknown metric or image format, an unwritable out_path, any
      runs.load_runs error, or no train/valid row holding the metric.
  """
  check_metric(metric)
  figure_format(out_path)  # a wrong extension fails first
  loaded = runs.load_runs(run_dirs)
  groups = runs.by_model(loaded)
  check_figure_path(out_path)  # before drawing, not after
  directions = [d for d in runs.DIRECTIONS if any(key[0] == d for key in groups)]
  fig, axes = plt.subplots(2, len(directions), figsize=(6.5 * len(directions), 8.5),
                           squeeze=False, layout="constrained", height_ratios=(3, 2))
  drawn = sum(_panel(ax, d, groups, metric) for ax, d in zip(axes[0], directions))
  for ax, d in zip(axes[1], directions):
    _panel(ax, d, groups, metric, zoom=True)
  if not drawn:
    plt.close(fig)
    raise UserError(f"{', '.join(run_dirs)}: no train or valid rows with {metric} in "
                    "metrics.jsonl")
  data = sorted({(r.config.get("data", {}).get("task", "?"), r.config.get("data", {}).get("seq_len"))
                 for r in loaded}, key=str)
  what = "; ".join(f"{task} task, L = {length}" for task, length in data)
  fig.suptitle(f"Language models, {metric} ({what}): train dashed, validation solid", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
