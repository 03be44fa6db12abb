"""Figs. 18 and 19 (App. E): time and peak memory against the number of layers at a fixed L."""

import matplotlib.pyplot as plt

from performer import attention
from performer.errors import UserError
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure
from performer.figures.speed import LINESTYLES, MODES, OTHER_COLOURS, REQUIRED, TAGS

NAME = "speed-layers"  # performer figure NAME
INPUT = "runs/speed.json"  # what `performer speed --layers` writes without --out
SUMMARY = "Figs. 18-19 time and memory against the number of layers (--input speed JSON)"


def render(input_path, out_path):
  """Reads a `performer speed --layers` result and draws, per (model, direction, mode, L), the
  median step time and the peak memory against the number of layers; identity is the paper's
  "X (OPT)" model (Fig. 19).

  Returns:
    out_path.

  Raises:
    UserError: the file is missing, not a speed result, or has no row of a --layers sweep.
  """
  figure_format(out_path)
  record, rows = load_rows(input_path, "speed", REQUIRED)
  rows = [r for r in rows if isinstance(r.get("num_layers"), int)]
  if not rows:
    raise UserError(f"{input_path}: no row with num_layers; run `performer speed --layers ...`")
  check_figure_path(out_path)
  groups = sorted({(r["config"], r["direction"], r["mode"], r["L"]) for r in rows})
  fig, axes = plt.subplots(len(groups), 2, figsize=(12, 3.6 * len(groups)), squeeze=False,
                           layout="constrained")
  for (config, direction, mode, length), (ax_time, ax_mem) in zip(groups, axes):
    group = [r for r in rows if (r["config"], r["direction"], r["mode"], r["L"])
             == (config, direction, mode, length)]
    for name in sorted({r["attention"] for r in group}):
      curve = sorted((r for r in group if r["attention"] == name), key=lambda r: r["num_layers"])
      ok = [r for r in curve if r["status"] == "ok"]
      failed = [r for r in curve if r["status"] != "ok"]
      label = "identity (X (OPT))" if name == "identity" else name
      if failed:
        label += f" ({failed[0]['status']} at {failed[0]['num_layers']} layers)"
      style = dict(color=attention.colour(name, OTHER_COLOURS.get(name, "0.3")), marker="o",
                   markersize=3, linestyle=LINESTYLES.get(name, "-"), label=label)
      ax_time.plot([r["num_layers"] for r in ok], [r["median_ms"] / 1e3 for r in ok], **style)
      memory = [r for r in ok if r.get("peak_bytes")]
      ax_mem.plot([r["num_layers"] for r in memory], [r["peak_bytes"] / 2 ** 30 for r in memory],
                  **style)
    title = f"{config} model, {TAGS.get(direction, direction)}, {MODES.get(mode, mode)}, L={length}"
    for ax, ylabel in ((ax_time, "time per step (s), median"), (ax_mem, "peak memory (GiB)")):
      ax.set_xlabel("number of layers")
      ax.set_ylabel(ylabel)
      ax.set_ylim(bottom=0)
      ax.set_title(title, fontsize=10)
      ax.grid(True, alpha=0.3)
    ax_mem.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
  device = (record.get("environment") or {}).get("device") or "?"
  fig.suptitle(f"Speed and memory against depth on {device} (batch 1)", fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
