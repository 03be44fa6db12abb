"""Fig. 3: time and peak memory against L, from a `performer speed` result file."""

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, NullLocator

from performer import attention
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "speed"  # performer figure NAME
SUMMARY = "Fig. 3 time and memory against L (--input speed JSON)"

REQUIRED = {"config": str, "attention": str, "direction": str, "mode": str, "L": float,
            "status": str}
# Curves that are not a registered backend (a backend's colour is its attention.info's).
OTHER_COLOURS = {"performer_pytorch": "0.5", "favor_scan": "m"}
# Dashed: the OPT bound; dash-dotted: the exact attentions; dotted: other libraries.
LINESTYLES = {"identity": "--", "exact": "-.", "exact_blockwise": "-.", "exact_dot_product": "-.",
              "performer_pytorch": ":"}
TAGS = {"bidirectional": "(B)", "causal": "(U)"}
MODES = {"fwd": "forward", "fwdbwd": "forward + backward"}


def _series(row, by_chunk):
  """The curve a row belongs to, as a sortable key: (attention, L or chunk size, span, batch
  tokens, fused; -1: the platform's)."""
  group = -1 if row.get("batch_tokens") is None else row["batch_tokens"]
  fused = -1 if row.get("fused") is None else int(row["fused"])
  if by_chunk:
    return row["attention"], row["L"], row.get("span") or 0, group, fused
  return row["attention"], row.get("chunk_size") or 0, row.get("span") or 0, group, fused


def _label(key, by_chunk):
  attention, number, span, group, fused = key
  name = "identity (OPT)" if attention == "identity" else attention
  span = ((f", span {span}" if span else "") + (f", batch tokens {group}" if group >= 0 else "")
          + ("" if fused < 0 else ", fused kernel" if fused else ", XLA form"))
  if by_chunk:
    return f"{name}, L={number}{span}"
  return name + (f", chunk {number}" if number else "") + span


def _draw(ax_time, ax_mem, group, by_chunk):
  """Plots one row of panels; returns nothing."""
  keys = sorted({_series(r, by_chunk) for r in group})
  attentions = [k[0] for k in keys]
  for i, key in enumerate(keys):
    x_of = (lambda r: r.get("chunk_size")) if by_chunk else (lambda r: r["L"])
    curve = sorted((r for r in group if _series(r, by_chunk) == key),
                   key=lambda r: x_of(r) or 0)
    ok = [r for r in curve if r["status"] == "ok"]
    failed = [r for r in curve if r["status"] != "ok"]
    label = _label(key, by_chunk)
    implementations = sorted({r["implementation"] for r in ok if r.get("implementation")})
    if implementations:  # jax.nn.dot_product_attention: xla or cudnn
      label += f" [{', '.join(implementations)}]"
    if failed:
      where = (f"chunk {failed[0]['chunk_size']}" if by_chunk and failed[0].get("chunk_size")
               else f"L={failed[0]['L']}")
      label += f" ({failed[0]['status']} at {where})"
    # One colour per curve: by attention, unless an attention has several curves.
    unique = attentions.count(key[0]) == 1
    colour = attention.colour(key[0], OTHER_COLOURS.get(key[0], "0.3")) if unique else f"C{i % 10}"
    style = dict(color=colour, marker="o", markersize=3, linestyle=LINESTYLES.get(key[0], "-"),
                 label=label)
    memory = [r for r in ok if r.get("peak_bytes")]
    for ax, points, value in ((ax_time, ok, lambda r: r["median_ms"] / 1e3),
                              (ax_mem, memory, lambda r: r["peak_bytes"] / 2 ** 30)):
      if by_chunk and not curve[0].get("chunk_size"):  # no chunks: its value at every chunk size
        for r in points:
          ax.axhline(value(r), **dict(style, marker=None, linestyle=":"))
      else:
        ax.plot([x_of(r) for r in points], [value(r) for r in points], **style)


def render(input_path, out_path):
  """Reads a speed JSON file and writes the figure to out_path.

  Raises:
    UserError: the file is missing, not JSON, not a speed result, or lacks
      the columns above.
  """
  figure_format(out_path)  # a wrong extension fails first
  record, rows = load_rows(input_path, "speed", REQUIRED)
  check_figure_path(out_path)  # before drawing, not after
  groups = sorted({(r["config"], bool(r.get("layer")), r["direction"], r["mode"]) for r in rows})
  fig, axes = plt.subplots(len(groups), 2, figsize=(13, 3.6 * len(groups)), squeeze=False,
                           layout="constrained")
  device = (record.get("environment") or {}).get("device") or "?"
  studies = []
  for (config, layer, direction, mode), (ax_time, ax_mem) in zip(groups, axes):
    group = [r for r in rows if (r["config"], bool(r.get("layer")), r["direction"], r["mode"])
             == (config, layer, direction, mode)]
    chunks = sorted({r["chunk_size"] for r in group if r.get("chunk_size")})
    by_chunk = len(chunks) > 1
    studies.append(by_chunk)
    _draw(ax_time, ax_mem, group, by_chunk)
    where = "attention layer" if layer else f"{config} model"
    title = f"{where}, {TAGS.get(direction, direction)}, {MODES.get(mode, mode)}"
    for ax, ylabel in ((ax_time, "time per step (s), median"), (ax_mem, "peak memory (GiB)")):
      if not any(len(line.get_xdata()) for line in ax.get_lines()):  # every row skipped or failed
        statuses = ", ".join(sorted({r["status"] for r in group}))
        ax.text(0.5, 0.5, f"nothing measured ({statuses})", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        continue
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      if by_chunk:  # the measured block lengths in plain numbers; a narrow range: linear y
        ax.xaxis.set_major_locator(FixedLocator(chunks))
        ax.xaxis.set_major_formatter(lambda x, _: f"{x:g}")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_yscale("linear")
        ax.set_ylim(bottom=0)
      ax.set_xlabel("chunk size (block length)" if by_chunk else "sequence length L")
      ax.set_ylabel(ylabel)
      ax.set_title(title, fontsize=10)
      ax.grid(True, which="both", alpha=0.3)
    # Beside the memory panel: the two panels share it, and inside it covers curves.
    handles, labels = ax_time.get_legend_handles_labels()
    ax_mem.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1),
                  borderaxespad=0)
  against = ("chunk size" if all(studies) else "L" if not any(studies)
             else "L (rows with several chunk sizes: against chunk size)")
  opt = "; identity = OPT" if any(r["attention"] == "identity" for r in rows) else ""
  dtypes = "/".join(sorted({r.get("dtype") or "float32" for r in rows}))
  fig.suptitle(f"Speed and memory against {against} on {device} (batch 1, {dtypes}{opt})",
               fontsize=11)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
