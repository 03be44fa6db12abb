"""Fig. 3: time and peak memory against L, from a `performer speed` result file.

One row of two log-log panels (time, memory) per (config, model or layer,
direction, mode) in the file; one curve per attention, the identity
attention (the paper's OPT, the largest possible speed-up) dashed. A series
that ran out of memory or time says so in its legend entry. Never
recomputes anything.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from performer.figures.io import check_figure_path, load_rows, save_figure  # pylint: disable=wrong-import-position

REQUIRED = {"config": str, "attention": str, "direction": str, "mode": str, "L": float,
            "status": str}
COLOURS = {"exact": "C3", "performer_softmax": "C0", "performer_relu": "C2", "identity": "k",
           "favor_scan": "C1"}
TAGS = {"bidirectional": "(B)", "causal": "(U)"}
MODES = {"fwd": "forward", "fwdbwd": "forward + backward"}


def _label(row):
  chunk = f", chunk {row['chunk_size']}" if row.get("chunk_size") else ""
  name = "identity (OPT)" if row["attention"] == "identity" else row["attention"]
  return name + chunk


def render(input_path, out_path):
  """Reads a speed JSON file and writes the figure to out_path.

  Raises:
    UserError: the file is missing, not JSON, not a speed result, or lacks
      the columns above.
  """
  record, rows = load_rows(input_path, "speed", REQUIRED)
  check_figure_path(out_path)
  groups = sorted({(r["config"], bool(r.get("layer")), r["direction"], r["mode"]) for r in rows})
  fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.6 * len(groups)), squeeze=False)
  device = (record.get("environment") or {}).get("device") or "?"
  for (config, layer, direction, mode), (ax_time, ax_mem) in zip(groups, axes):
    group = [r for r in rows if (r["config"], bool(r.get("layer")), r["direction"], r["mode"])
             == (config, layer, direction, mode)]
    for label in sorted({_label(r) for r in group}):
      curve = sorted((r for r in group if _label(r) == label), key=lambda r: r["L"])
      ok = [r for r in curve if r["status"] == "ok"]
      failed = [r for r in curve if r["status"] != "ok"]
      if failed:
        label += f" ({failed[0]['status']} at L={failed[0]['L']})"
      style = dict(color=COLOURS.get(curve[0]["attention"], "C7"), marker="o", markersize=3,
                   linestyle="--" if curve[0]["attention"] == "identity" else "-", label=label)
      ax_time.plot([r["L"] for r in ok], [r["median_ms"] / 1e3 for r in ok], **style)
      memory = [r for r in ok if r.get("peak_bytes")]
      ax_mem.plot([r["L"] for r in memory], [r["peak_bytes"] / 2 ** 30 for r in memory], **style)
    where = "attention layer" if layer else f"{config} model"
    title = f"{where}, {TAGS.get(direction, direction)}, {MODES.get(mode, mode)}"
    for ax, ylabel in ((ax_time, "time per step (s), median"), (ax_mem, "peak memory (GiB)")):
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_xlabel("sequence length L")
      ax.set_ylabel(ylabel)
      ax.set_title(title, fontsize=10)
      ax.grid(True, which="both", alpha=0.3)
    ax_time.legend(fontsize=7)
  fig.suptitle(f"Speed and memory against L on {device} (batch 1; identity = OPT)", fontsize=11)
  fig.tight_layout(rect=(0, 0, 1, 0.985))
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
