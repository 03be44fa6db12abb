"""Fig. 14: a Transformer against its own weights with FAVOR+, relative error against layer."""

import os

import matplotlib.pyplot as plt

from performer import verdicts
from performer.errors import UserError
from performer.figures.tables import Column, write_table
from performer.figures.io import check_figure_path, figure_format, load_rows, save_figure

NAME = "error-propagation"  # performer figure NAME
SUMMARY = "Fig. 14 Transformer vs FAVOR+ error against layer (--input JSON)"

REQUIRED = {"setting": str, "quantity": str, "m": float, "layer": float, "num_layers": float,
            "error_mean": float, "error_min": float, "error_max": float, "draws": float}

QUANTITIES = {
    "hidden": "residual stream after block l",
    "output": "output distribution, model cut after block l",
    "attention": "block l's attention alone, exact input",
}
SETTINGS = {"trained": "trained weights", "init": "at initialisation"}


def render(input_path, out_path):
  """Reads an error_propagation JSON file and writes the figure to out_path (PNG by default).

  Raises:
    UserError: the file is missing, not JSON, not an error_propagation
      result, lacks the columns above, or holds none of the quantities.
  """
  figure_format(out_path)  # a wrong extension fails first
  record, rows = load_rows(input_path, "error_propagation", REQUIRED)
  rows = [r for r in rows if r["quantity"] in QUANTITIES]
  if not rows:
    raise UserError(f"{input_path}: no rows of quantity {', '.join(QUANTITIES)}")
  check_figure_path(out_path)  # before drawing, not after
  settings = list(dict.fromkeys(r["setting"] for r in rows))
  quantities = [q for q in QUANTITIES if any(r["quantity"] == q for r in rows)]
  ms = sorted({r["m"] for r in rows})
  colours = {m: plt.get_cmap("viridis")(i / max(len(ms) - 1, 1) * 0.9) for i, m in enumerate(ms)}
  fig, axes = plt.subplots(len(quantities), len(settings), squeeze=False, layout="constrained",
                           figsize=(4.8 * len(settings) + 1.2, 3.3 * len(quantities)))
  for col, setting in enumerate(settings):
    for row_index, quantity in enumerate(quantities):
      ax = axes[row_index][col]
      panel = [r for r in rows if r["setting"] == setting and r["quantity"] == quantity]
      for m in ms:
        curve = sorted((r for r in panel if r["m"] == m), key=lambda r: r["layer"])
        if not curve:
          continue
        layers = [r["layer"] for r in curve]
        ax.plot(layers, [r["error_mean"] for r in curve], marker="o", markersize=4,
                color=colours[m], label=f"m = {m:g}")
        ax.fill_between(layers, [r["error_min"] for r in curve], [r["error_max"] for r in curve],
                        color=colours[m], alpha=0.18, linewidth=0)
      values = [r[k] for r in panel for k in ("error_mean", "error_min")]
      if values and min(values) > 0:
        ax.set_yscale("log")
      elif values and max(values) == 0:
        ax.text(0.5, 0.5, "all errors 0", transform=ax.transAxes, ha="center")
      layers = sorted({int(r["layer"]) for r in panel})
      ax.set_xticks(layers)
      ax.set_xlabel("layer l")
      ax.set_ylabel("relative error (Frobenius)")
      num_layers = int(panel[0]["num_layers"]) if panel else 0
      note = (" (l < N: probe)" if quantity == "output" and setting == "trained"
              and num_layers > 1 else "")
      ax.set_title(f"{SETTINGS.get(setting, setting)} (N = {num_layers}): "
                   f"{QUANTITIES[quantity]}{note}", fontsize=9)
      ax.grid(True, which="both", alpha=0.3)
  handles, labels = axes[0][0].get_legend_handles_labels()
  if handles:
    fig.legend(handles, labels, loc="outside right center", fontsize=8)
  first = rows[0]
  what = f"{first.get('attention', 'FAVOR')} ({first.get('projection', '?')} features)"
  data = (f"{first['sequences']} {first.get('split', '')} sequences; "
          if "sequences" in first else "")
  config = record.get("config") if isinstance(record.get("config"), dict) else {}
  direction = {True: " (U)", False: " (B)"}.get(first.get("causal"), "")
  run = f"{config['run']}{direction}: " if isinstance(config.get("run"), str) else ""
  fig.suptitle(f"{run}Transformer vs the same weights with {what}\n{data}lines: mean of "
               f"{first['draws']:g} draws, bands: min to max", fontsize=10)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path, write_claims(rows, claims_path(out_path))


def claims_path(out_path):
  """Where the claims table of a figure goes: <out stem>_claims.md."""
  return os.path.splitext(out_path)[0] + "_claims.md"


CLAIM = "output error grows with the number of layers (App. D.1, Fig. 14)"
WHY = ("App. D.1: error propagation through the non-attention parts of the Transformer is one of "
       "the primary reasons its weights cannot be used as a Performer's without fine-tuning; "
       "Fig. 14 plots the output error for varying numbers of layers.")
# The smallest change in relative error worth a claim (errors here are 0.05-0.8); a 'better'
# claim is decided by its interval, delta is shown only.
DELTA = 0.01


def decide(rows):
  """Verdicts of the declared claim for each (setting, m) whose model has more than one block:
  relative error of the output after the last block above that after the first, paired over
  the draws of W (verdicts.paired), Holm over the file's claims."""
  claims, evidence = [], {}
  for setting in dict.fromkeys(r["setting"] for r in rows):
    for m in sorted({r["m"] for r in rows if r["setting"] == setting}):
      curve = {int(r["layer"]): r for r in rows if r["setting"] == setting and r["m"] == m
               and r["quantity"] == "output"}
      if len(curve) < 2:
        continue
      first, last = curve[min(curve)], curve[max(curve)]
      cid = f"{setting}, m = {m:g}: output error after block {max(curve)} above block {min(curve)}"
      claims.append(verdicts.Claim(id=cid, text=CLAIM, kind="better", a=f"block {max(curve)}",
                                   b=f"block {min(curve)}", metric="relative error",
                                   split=str(first.get("split", "")), delta=DELTA,
                                   delta_source="declared: 0.01 relative error", family="fig14"))
      if min(len(first.get("errors", ())), len(last.get("errors", ()))) >= 2:
        evidence[cid] = verdicts.paired(last["errors"], first["errors"])
  return [v if v.claim.id in evidence else verdicts.Verdict(
      v.claim, v.verdict, "the file has fewer than 2 per-draw errors (run error-propagation "
      "again)") for v in verdicts.decide(claims, evidence)]


def write_claims(rows, out_path):
  """Writes the Fig. 14 claims table (Markdown and CSV) decided by `decide`."""
  decided = decide(rows)
  table = []
  for v in decided:
    ev = v.evidence
    low, high = ev.interval() if ev is not None else (None, None)
    table.append([v.claim.id, v.claim.text,
                  None if ev is None else f"{ev.diff:+.3f}",
                  None if ev is None else f"{low:+.3f} .. {high:+.3f}",
                  None if ev is None else f"{ev.mde():.3f}",
                  None if ev is None else ev.seeds[0], v.verdict, v.reason])
  notes = [f"Paper: {WHY}",
           "Differences: relative error (Frobenius, all positions) after the last block minus "
           "after the first, mean over the draws of W; the interval is a t interval over the "
           "draws, paired (each draw gives every layer). The probe's sequences are fixed: there "
           "is no test-set term (performer/verdicts.py, paired).",
           "Setting init has the deepest model (more blocks, random weights); trained is the "
           "2-block mini model."]
  return write_table(out_path, "Fig. 14 (App. D.1), decided by the verdict rule", COLUMNS,
                     table, notes)[0]


COLUMNS = (Column("claim"), Column("paper"), Column("difference"), Column("95% interval"),
           Column("MDE"), Column("draws"), Column("verdict"), Column("why"))
