"""Figs. 10-11 (App. C.4): one protein's attention matrices, from an attention-maps result.

Writes the model's maps, exact softmax's (Performer runs) and a two-head zoom; never recomputes."""

import os
import textwrap

import matplotlib.pyplot as plt
import numpy as np

from performer.errors import UserError
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "attention-maps"  # performer figure NAME
SUMMARY = "Figs. 10-11 a protein's attention maps and a two-head zoom (--input JSON)"

REQUIRED = {"layer": float, "head": float, "name": str, "exact_diagonal_share": float,
            "exact_top_column_share": float}
ZOOM = 25  # tokens shown in the zoom (Fig. 11)
TITLES = {"favor": "FAVOR implicit attention", "exact": "exact softmax attention"}


def load(input_path):
  """(record, rows, maps): the JSON result and {kind: [layers, H, L, L]} from its .npz.

  Raises:
    UserError: see io.load_rows; the .npz is missing, unreadable, or does not
      fit the rows (layers, heads, labels).
  """
  record, rows = load_rows(input_path, "attention_maps", REQUIRED)
  name = record.get("arrays")
  if not isinstance(name, str):
    raise UserError(f"{input_path}: names no .npz of maps (field 'arrays')")
  path = os.path.join(os.path.dirname(os.path.abspath(input_path)), name)
  try:
    with np.load(path) as npz:
      maps = {kind: np.asarray(npz[kind]) for kind in ("favor", "exact") if kind in npz.files}
  except FileNotFoundError:
    raise UserError(f"{path}: no such file (the maps of {input_path})") from None
  except (OSError, ValueError) as e:
    raise UserError(f"{path}: not a .npz of attention maps ({e})") from None
  layers = sorted({int(r["layer"]) for r in rows})
  heads = sorted({int(r["head"]) for r in rows})
  labels = record.get("labels") or []
  for kind, array in maps.items():
    if array.ndim != 4 or array.shape[:2] != (len(layers), len(heads)) or \
        array.shape[2:] != (len(labels), len(labels)):
      raise UserError(f"{path}: {kind} maps of shape {array.shape} do not fit {len(layers)} "
                      f"layers x {len(heads)} heads x {len(labels)} tokens of {input_path}")
  if "exact" not in maps:
    raise UserError(f"{path}: holds no exact maps")
  return record, rows, maps


def sibling(out_path, suffix):
  """out_path with `suffix` before its extension: a.png -> a_exact.png."""
  stem, ext = os.path.splitext(out_path)
  return f"{stem}_{suffix}{ext or '.png'}"


def choose_heads(rows, kind):
  """(most diagonal row, most vertical other row) by the `kind` numbers of the rows."""
  key = lambda name: (lambda r: r.get(f"{kind}_{name}") or 0.0)
  diagonal = max(rows, key=key("diagonal_share"))
  others = [r for r in rows if r is not diagonal] or [diagonal]
  return diagonal, max(others, key=key("top_column_share"))


def _title(record):
  protein, run = record.get("protein", {}), record.get("run", {})
  return (f"{protein.get('accession', '?')} ({protein.get('residues', '?')} residues), "
          f"{run.get('attention', '?')} {'(U)' if run.get('causal') else '(B)'} model")


def _wrapped(text, width_inches):
  """A title broken into lines no wider than the figure (about 14 characters an inch at 9 pt)."""
  return textwrap.fill(text, max(40, int(14 * width_inches)))


def _grid(record, rows, maps, kind):
  array = maps[kind]
  n_layers, n_heads = array.shape[:2]
  layers = sorted({int(r["layer"]) for r in rows})
  by_name = {(int(r["layer"]), int(r["head"])): r for r in rows}
  cell = min(max(1.9, 6.5 / n_heads), 3.2)  # few heads get larger panels, not a thin strip
  width = cell * n_heads
  fig, axes = plt.subplots(n_layers, n_heads, figsize=(width, (cell + 0.15) * n_layers + 0.9),
                           squeeze=False, layout="constrained")
  for a, layer in enumerate(layers):
    for h in range(n_heads):
      ax = axes[a, h]
      ax.imshow(array[a, h], cmap="viridis", vmin=0.0, vmax=max(float(array[a, h].max()), 1e-12),
                interpolation="nearest")
      ax.set_xticks([])
      ax.set_yticks([])
      row = by_name.get((layer, h), {})
      tv = row.get("tv_mean")
      ax.set_title(f"head {layer}-{h}" + (f"  TV {tv:.2f}" if kind == "favor" and tv is not None
                                          else ""), fontsize=8)
      if h == 0:
        ax.set_ylabel(f"layer {layer}", fontsize=9)
  note = ("; TV: mean total variation from exact softmax per query"
          if kind == "favor" and "exact" in maps else "")
  fig.suptitle(_wrapped(f"{_title(record)}: {TITLES[kind]}, layers x heads (rows: queries, "
                        f"columns: keys; each cell scaled 0 to its max{note})", width), fontsize=9)
  return fig


def _zoom(record, rows, maps, kind):
  labels = record["labels"]
  shown = min(ZOOM, len(labels))
  layers = sorted({int(r["layer"]) for r in rows})
  picks = choose_heads(rows, kind)
  kinds = [k for k in ("favor", "exact") if k in maps]
  fig, axes = plt.subplots(len(picks), len(kinds), figsize=(max(4.6 * len(kinds), 6.0),
                                                            4.4 * len(picks) + 0.3),
                           squeeze=False, layout="constrained")
  for a, (row, why) in enumerate(zip(picks, ("most diagonal", "most vertical"))):
    layer, head = int(row["layer"]), int(row["head"])
    for b, k in enumerate(kinds):
      ax = axes[a, b]
      block = maps[k][layers.index(layer), head, :shown, :shown]
      image = ax.imshow(block, cmap="viridis", vmin=0.0, vmax=max(float(block.max()), 1e-12),
                        interpolation="nearest")
      ax.set_xticks(range(shown), labels[:shown], fontsize=7)
      ax.set_yticks(range(shown), labels[:shown], fontsize=7)
      ax.set_xlabel("key", fontsize=8)
      ax.set_ylabel("query", fontsize=8)
      if a == 0:
        measure = f"{row[f'{kind}_diagonal_share']:.2f} within |i-j| <= 1"
      else:
        top = row.get(f"{kind}_top_column")
        known = isinstance(top, int) and 0 <= top < len(labels)
        where = f"position {top} ({labels[top]})" if known else "one position"
        measure = f"{row[f'{kind}_top_column_share']:.2f} onto {where}"
      ax.set_title(f"head {layer}-{head} ({why}: {measure})\n{TITLES[k]}", fontsize=8)
      fig.colorbar(image, ax=ax, shrink=0.8)
  fig.suptitle(f"{_title(record)}\nfirst {shown} tokens, weights not renormalised", fontsize=9)
  return fig


def render(input_path, out_path):
  """Reads an attention_maps result and writes the grid(s) and the zoom.

  Returns:
    The paths written, as a tuple: out_path, [<stem>_exact], <stem>_zoom.

  Raises:
    UserError: see `load`; an image format matplotlib cannot write or an
      unwritable path.
  """
  figure_format(out_path)
  record, rows, maps = load(input_path)
  own = "favor" if "favor" in maps else "exact"
  jobs = [(out_path, lambda: _grid(record, rows, maps, own))]
  if own == "favor":
    jobs.append((sibling(out_path, "exact"), lambda: _grid(record, rows, maps, "exact")))
  jobs.append((sibling(out_path, "zoom"), lambda: _zoom(record, rows, maps, own)))
  for path, _ in jobs:
    check_figure_path(path)  # every path, before drawing any
  for path, draw in jobs:
    fig = draw()
    save_figure(fig, path)
    plt.close(fig)
  return tuple(path for path, _ in jobs)
