"""Fig. 5: a trained Transformer's weights loaded into other attentions, then fine-tuned.

Reads fine-tuned run folders (TrainConfig.init_from set); never recomputes anything."""

import os

import matplotlib.pyplot as plt

from performer.errors import UserError
from performer.figures import runs
from performer.figures.curves import STYLES, curve, diverged, seed_band, seed_curves, step_axis
from performer.figures.io import check_figure_path, figure_format, save_figure

NAME = "backward-compat"  # performer figure NAME
SUMMARY = "Fig. 5 a Transformer's weights fine-tuned as Performers (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "fig5_backward_compat.png"  # in the first run's parent folder

VARIANTS = ("Transformer (continued)", "Performer positive, redraw",
            "Performer positive, no redraw", "Performer trig", "Performer SMREG",
            "Performer-ReLU", "Linformer")
COLOURS = dict(zip(VARIANTS, ("C3", "C0", "C9", "C1", "C2", "C8", "C4")))


# The fig5 plan's recorded `variant` (plans/fig5.py) -> the paper's name.
PLAN_VARIANTS = {"exact": VARIANTS[0], "positive": VARIANTS[1], "no_redraw": VARIANTS[2],
                 "trig": VARIANTS[3], "smreg": VARIANTS[4], "linformer": VARIANTS[6]}


def variant(run):
  """The paper's Fig. 5 name of a run: from its recorded sweep value `variant`, else (a run
  trained by hand) from its attention and attention options."""
  if run.settings.get("variant") in PLAN_VARIANTS:
    return PLAN_VARIANTS[run.settings["variant"]]
  options = run.config.get("model", {}).get("attention_options") or {}
  if run.attention == "exact":
    return "Transformer (continued)"
  if run.attention == "performer_softmax":
    if options.get("kernel") == "trig":
      return "Performer trig"
    if options.get("scaling") == "sqrt_d":
      return "Performer SMREG"
    return "Performer positive, " + ("no redraw" if options.get("redraw_every") == 0 else "redraw")
  return run.label


def _source_accuracy(path, beside):
  """The last validation accuracy (%) of the run a fine-tuning started from, or None.

  path: its init_from; beside: the fine-tuned run's folder, whose sibling of the same name
  is the source once both are archived (plans/archive.py)."""
  sibling = os.path.join(os.path.dirname(os.path.normpath(beside)),
                         os.path.basename(os.path.normpath(path)))
  for where in (path, sibling):
    try:
      source = runs.load_run(where)
      break
    except UserError:
      continue
  else:  # moved or deleted: the figure still stands without its line
    return None
  steps, values = curve(source, "valid", "accuracy")
  return values[-1] if values else None


def _panel(ax, group, title):
  """Draws one panel's variants ({name: [(run, init_from)]}), its source line and y-range."""
  validation, seeds = [], 1
  outside = []  # (low, high) of train curves that fall outside the validation range
  for name in sorted(group, key=lambda n: (VARIANTS + (n,)).index(n)):
    members = sorted(group[name], key=lambda pair: pair[0].seed)
    colour = COLOURS.get(name, "C7")
    starts = [next((r["accuracy"] for r in run.metrics
                    if r["step"] == 0 and r["split"] == "valid" and "accuracy" in r), None)
              for run, _ in members]
    for split, style in STYLES.items():
      steps, values = seed_curves([run for run, _ in members], split, "accuracy")
      if not steps:
        continue
      mean = [sum(v) / len(v) for v in zip(*values)]
      label = None
      if split == "valid":
        validation += [x for v in values for x in v]
        seeds = max(seeds, len(values))
        label = name + diverged([run for run, _ in members])
        if None not in starts:
          label += f" (transferred: {100 * sum(starts) / len(starts):.1f}%)"
        seed_band(ax, steps, values, colour)
      else:
        outside.append((min(mean), max(mean)))
      ax.plot(steps, mean, color=colour, linestyle=style, label=label,
              marker="o" if split == "valid" else None, markersize=3)
  sources = {_source_accuracy(source, run.path) for pairs in group.values()
             for run, source in pairs} - {None}
  for value in sorted(sources):
    ax.axhline(value, color="0.5", linestyle=":", linewidth=1.2,
               label=f"source Transformer, end of training ({value:.1f}%)")
  if validation:
    low, high = min(validation + sorted(sources)), max(validation + sorted(sources))
    pad = 0.08 * (high - low or 1.0)
    ax.set_ylim(low - pad, high + pad)
    clipped = [(a, b) for a, b in outside if a < low - pad or b > high + pad]
    if clipped:
      title += (f"\ntrain (dashed) partly outside the range: {min(a for a, _ in clipped):.1f}-"
                f"{max(b for _, b in clipped):.1f}%")
  if seeds > 1:
    title += f"\nmean of {seeds} seeds, band: their range on validation"
  ax.set_title(title, fontsize=9)
  step_axis(ax, "fine-tuning step")
  ax.set_ylabel("accuracy (%)")
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
            borderaxespad=0)


def render(run_dirs, out_path):
  """Reads fine-tuned run folders and writes the figure to out_path.

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format, an unwritable out_path, any
      runs.load_runs error, a run without TrainConfig.init_from, or two runs
      of one variant and seed in one panel.
  """
  figure_format(out_path)
  loaded = runs.load_runs(run_dirs)
  panels = {}
  for run in loaded:
    source = run.config.get("train", {}).get("init_from")
    if not source:
      raise UserError(f"{run.path}: not a fine-tuned run (no TrainConfig.init_from); give the "
                      "runs that start from a trained Transformer")
    data = os.path.basename(os.path.normpath(run.config.get("data", {}).get("path", "?")))
    group = panels.setdefault((data, run.direction), {})
    name = variant(run)
    twin = next((r for r, _ in group.get(name, ()) if r.seed == run.seed), None)
    if twin:
      raise UserError(f"{run.path} and {twin.path}: both are {name} on {data} "
                      f"({run.direction}), seed {run.seed}; give one run per variant and seed")
    group.setdefault(name, []).append((run, source))
  check_figure_path(out_path)
  # At most two panels a row, each with its legend below it: beside or inside, legends of
  # five variants cover the curves or widen the image past a page.
  columns = min(2, len(panels))
  rows = -(-len(panels) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 5.2 * rows), squeeze=False,
                           layout="constrained")
  for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
  datasets = list(dict.fromkeys(data for data, _ in panels))  # as given; (U) before (B)
  order = sorted(panels, key=lambda k: (datasets.index(k[0]), list(runs.DIRECTIONS).index(k[1])))
  for ax, (data, direction) in zip(axes.flat, order):
    group = panels[(data, direction)]
    _panel(ax, group, f"{data} {runs.DIRECTIONS[direction]}")
  fig.suptitle("Backward compatibility (Fig. 5): validation solid, train dashed", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
