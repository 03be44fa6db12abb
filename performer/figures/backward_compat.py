"""Fig. 5: a trained Transformer's weights loaded into other attentions, then fine-tuned.

Reads fine-tuned run folders (TrainConfig.init_from set; `performer train`
scores the transferred model on valid at step 0) and draws validation (solid)
and train (dashed) accuracy against the fine-tuning step: one panel per
dataset and direction, one colour per variant, named as in the paper's
Fig. 5 from the run's attention and options (positive features with or
without redrawing, trig, SMREG, Linformer, the Transformer continued). The
source Transformer's last validation accuracy, read from the init_from
folder (or, once the runs are archived elsewhere, from the folder of that
name beside the fine-tuned run), is a grey dotted line. Never recomputes
anything.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from performer.errors import UserError  # pylint: disable=wrong-import-position
from performer.figures import runs  # pylint: disable=wrong-import-position
from performer.figures.curves import STYLES, curve, step_axis  # pylint: disable=wrong-import-position
from performer.figures.io import check_figure_path, figure_format, save_figure  # pylint: disable=wrong-import-position

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


def render(run_dirs, out_path):
  """Reads fine-tuned run folders and writes the figure to out_path.

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format, an unwritable out_path, any
      runs.load_runs error, a run without TrainConfig.init_from, or two runs
      of one variant in one panel.
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
    if name in group:
      raise UserError(f"{run.path} and {group[name][0].path}: both are {name} on {data} "
                      f"({run.direction}); give one run per variant")
    group[name] = (run, source)
  check_figure_path(out_path)
  # At most two panels a row, each with its legend below it: beside or inside, legends of
  # five variants cover the curves or widen the image past a page.
  columns = min(2, len(panels))
  rows = -(-len(panels) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 5.2 * rows), squeeze=False,
                           layout="constrained")
  for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
  for ax, ((data, direction), group) in zip(axes.flat, panels.items()):
    order = sorted(group, key=lambda n: (VARIANTS + (n,)).index(n))
    for name in order:
      run, _ = group[name]
      colour = COLOURS.get(name, "C7")
      start = next((r["accuracy"] for r in run.metrics
                    if r["step"] == 0 and r["split"] == "valid" and "accuracy" in r), None)
      for split, style in STYLES.items():
        steps, values = curve(run, split, "accuracy")
        if not steps:
          continue
        label = name if split == "valid" else None
        if label and start is not None:
          label += f" (transferred: {100 * start:.1f}%)"
        ax.plot(steps, values, color=colour, linestyle=style, label=label,
                marker="o" if split == "valid" else None, markersize=3)
    sources = {_source_accuracy(source, run.path) for run, source in group.values()} - {None}
    for value in sorted(sources):
      ax.axhline(value, color="0.5", linestyle=":", linewidth=1.2,
                 label=f"source Transformer, end of training ({value:.1f}%)")
    ax.set_title(f"{data} {runs.DIRECTIONS[direction]}", fontsize=10)
    step_axis(ax, "fine-tuning step")
    ax.set_ylabel("accuracy (%)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
              borderaxespad=0)
  fig.suptitle("Backward compatibility (Fig. 5): validation solid, train dashed", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
