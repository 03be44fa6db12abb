"""LRA ListOps: test accuracy of every attention of the zoo, and the contested Performer claim.

The claims were declared before the runs (docs/ARCHITECTURE.md, plans/listops.py, 2026-12-07)."""

import json
import os

import matplotlib.pyplot as plt
import numpy as np

from performer import verdicts
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import claims as claims_lib
from performer.figures import runs as runs_lib
from performer.figures.io import check_figure_path, save_figure
from performer.figures.tables import Column, write_table

NAME = "listops"  # performer figure NAME
SUMMARY = "LRA ListOps: test accuracy per attention and the Performer claims, decided (--runs)"
READS = "runs"  # render(run folders, out)

# A tenth of exact's gain over the identity control on test, measured on the study's own seeds.
# recall uses a twentieth; ListOps' gain is about a fifth of recall's, and a twentieth of it
# (about 1 pp) is under one model's own sampling error on 2,000 test examples (about 1.1 pp).
DELTA_FRACTION = 0.1
MOST_SEEDS = 6  # the Holm-aware seeds rule (verdicts.seeds_to_resolve at holm_level) stops here
FAMILY = "listops"
LABELS = {"exact": "Transformer (exact)", "favor_m128": "Performer-softmax m=128",
          "favor_m2": "Performer-softmax m=2", "relu": "Performer-ReLU m=128",
          "elu_plus_one": "linear (elu+1)", "linformer": "Linformer", "reformer": "Reformer",
          "identity": "identity (control)"}
PUBLISHED = ("LRA (Tay et al. 2021, Table 1; 6 layers, 8 heads, d 512, MLP 2,048, CLS pooling, "
             "batch 32, 5k steps, its Performer config 2 features): Transformer 36.37%, Performer "
             "18.01%. Skyformer (Chen et al. 2021, Table 1; 2 layers, 2 heads, d 64, MLP 128, "
             "mean pooling, lr 1e-4, batch 32, 50k steps, 128 features): softmax 38.37%, "
             "Performer 38.02%.")
# (id, text, kind, a, b)
DECLARED = (
    ("Performer-softmax matches the Transformer", "Performers are competitive on LRA (App. "
     "D.5); Skyformer: 38.02 vs 38.37%, LRA: 18.01 vs 36.37%", "matches", "favor_m128", "exact"),
    ("m=2 falls short of m=128", "LRA's Performer config used 2 random features: does that "
     "explain its 18.01%?", "worse", "favor_m2", "favor_m128"),
    ("Performer-ReLU matches the Transformer", "generalized ReLU attention is as good as "
     "softmax (Table 2; App. D.5)", "matches", "relu", "exact"),
)
ROW_COLUMNS = (Column("row"), Column("seeds"), Column("test accuracy % (mean)", "{:.2f}"),
               Column("95% interval"), Column("min", "{:.2f}"), Column("max", "{:.2f}"),
               Column("steps (median)", "{:.0f}"), Column("stopped early"))
CLAIM_COLUMNS = (Column("claim"), Column("paper"), Column("difference (pp)"),
                 Column("95% interval (pp)"), Column("MDE (pp)"), Column("delta (pp)"),
                 Column("seeds"), Column("verdict"), Column("why"))


def label(row):
  return LABELS.get(row, row)


def _rows(loaded):
  """{row: [runs by seed]} in LABELS' order.

  Raises:
    UserError: a run without the study's settings (task listops, a row of LABELS), one
      without a test eval, or a row and seed twice.
  """
  out, seen = {}, {}
  for run in loaded:
    row = run.settings.get("row")
    if run.settings.get("task") != "listops" or row not in LABELS:
      raise UserError(f"{run.path}: not a listops run (its config.json records no task "
                      f"'listops' and a row of {', '.join(LABELS)}; performer reproduce --only "
                      "listops records them)")
    if "test" not in run.evals and not run.failed:
      raise UserError(f"{run.path}: no eval_test.json (run performer eval --split test)")
    other = seen.setdefault((row, run.seed), run.path)
    if other != run.path:
      raise UserError(f"{run.path} and {other}: both are {row} seed {run.seed}")
    out.setdefault(row, []).append(run)
  return {r: sorted(out[r], key=lambda run: run.seed) for r in LABELS if r in out}


def decide(rows, *, bootstrap=verdicts.BOOTSTRAP):
  """(verdicts of the declared claims whose rows ran, the gate or None, more seeds): seeds
  paired; more seeds [{claim, rows, seeds}] by the Holm-aware rule (seeds_to_resolve at
  holm_level, at most MOST_SEEDS)."""
  gate = None
  if "exact" in rows and "identity" in rows:
    (exact, _), (control, _) = (claims_lib.replicates(rows[r]) for r in ("exact", "identity"))
    if exact is not None and control is not None:
      gate = verdicts.gate("B", exact, control, bootstrap=bootstrap)
  delta = DELTA_FRACTION * gate.evidence.diff if gate and gate.evidence.diff > 0 else 1.0
  claims, evidence, notes, groups = [], {}, {}, {}
  for cid, text, kind, a, b in DECLARED:
    if a not in rows or b not in rows:
      continue
    claims.append(verdicts.Claim(id=cid, text=text, kind=kind, a=a, b=b, metric="accuracy",
                                 split="test", delta=delta, family=FAMILY,
                                 delta_source=f"{DELTA_FRACTION:g} x exact's gain over identity",
                                 direction="B"))
    (runs_a, runs_b), pairs = claims_lib.paired_runs(rows, a, b)
    (ra, why_a), (rb, why_b) = claims_lib.replicates(runs_a), claims_lib.replicates(runs_b)
    if ra is None or rb is None:
      notes[cid] = why_a or why_b
    else:
      groups[cid] = (ra, rb, pairs)
      evidence[cid] = verdicts.estimate(ra, rb, bootstrap=bootstrap, paired_seeds=pairs)
  if gate is None:
    notes = {c.id: "needs exact and identity runs with per-sequence test evals" for c in claims}
  decided = [v if v.claim.id not in notes else verdicts.Verdict(v.claim, verdicts.NOT_TESTED,
                                                                notes[v.claim.id])
             for v in verdicts.decide(claims, evidence, {"B": gate} if gate else {})]
  more = []
  for v in decided:
    if v.verdict == verdicts.INCONCLUSIVE and v.claim.id in groups:
      a, b, pairs = groups[v.claim.id]
      n = verdicts.seeds_to_resolve(v.claim, a, b, v.evidence, MOST_SEEDS, paired_seeds=pairs,
                                    alpha=verdicts.holm_level(decided, v.claim))
      if n:
        more.append({"claim": v.claim.id, "rows": [v.claim.a, v.claim.b], "seeds": n})
  return decided, gate, more


def render(run_dirs, out_path):
  """Writes the figure (test accuracy per row, each seed and the mean's 95% interval) to
  out_path and <stem>.md/.csv (rows), <stem>_claims.md/.csv and <stem>.json beside it; returns
  the paths.

  Raises:
    UserError: an unwritable path, a run that is not a listops run, or any runs.load_runs
      error.
  """
  rows = _rows(runs_lib.load_runs(run_dirs))
  check_figure_path(out_path)
  stem = os.path.splitext(out_path)[0]
  levels, row_cells = {}, []
  for row, group in rows.items():
    acc = np.array([100 * run.value("test", "accuracy") if run.value("test", "accuracy")
                    is not None else np.nan for run in group])
    reps, _ = claims_lib.replicates(group)
    interval = None
    if reps is not None and reps.seeds >= 2:
      low, high = verdicts.level(reps).interval()
      interval = (100 * max(low, 0.0), 100 * min(high, 1.0))
    levels[row] = (acc, interval)
    finite = acc[np.isfinite(acc)]
    stopped = sum(os.path.isfile(os.path.join(r.path, "stopped_early.json")) for r in group)
    row_cells.append([label(row), len(group), float(finite.mean()) if finite.size else None,
                      "-" if interval is None else f"{interval[0]:.2f} .. {interval[1]:.2f}",
                      float(finite.min()) if finite.size else None,
                      float(finite.max()) if finite.size else None,
                      float(np.median([r.step for r in group])), f"{stopped}/{len(group)}"])
  decided, gate, more = decide(rows)
  claim_cells = []
  for v in decided:
    cells = verdicts.row(v)
    claim_cells.append([v.claim.id, v.claim.text, cells["difference (pp)"],
                        cells["95% interval (pp)"], cells["MDE (pp)"], cells["delta (pp)"],
                        cells["seeds"], v.verdict, v.reason])
  _draw(out_path, levels)
  more_line = "; ".join(f"{m['claim']}: {m['seeds']}" for m in more) or "none"
  written = [
      *write_table(stem + ".md", "LRA ListOps: test accuracy per attention", ROW_COLUMNS,
                   row_cells, ["Accuracy over the test expressions, in %; the 95% interval "
                               "from the seeds (t) and the test set (bootstrap), verdicts.level. "
                               "Steps: where the runs stopped (the plateau rule) or the cap.",
                               f"Published: {PUBLISHED}"]),
      *write_table(stem + "_claims.md", "LRA ListOps: the declared claims, decided by the "
                   "verdict rule", CLAIM_COLUMNS, claim_cells, [
                       f"Scale gate (B): {_gate_line(gate)}",
                       f"Seeds per row (at most {MOST_SEEDS}, both rows of a claim) that would "
                       "bring an inconclusive claim's MDE at its Holm level under delta "
                       f"(verdicts.seeds_to_resolve, holm_level): {more_line}",
                       f"Published: {PUBLISHED}",
                       "Differences: mean test accuracy of the first row minus the second; seeds "
                       "paired plus a paired bootstrap over test examples. The claims: "
                       "performer/figures/listops.py; the rule: performer/verdicts.py."])]
  record = {"rows": {row: {"accuracies": [float(a) for a in acc],
                           "interval": list(interval) if interval else None}
                     for row, (acc, interval) in levels.items()},
            "gate": claims_lib.gate_record(gate) if gate is not None else None,
            "claims": [{"id": v.claim.id, "verdict": v.verdict, "reason": v.reason,
                        "difference": v.evidence.diff if v.evidence else None,
                        "delta": v.claim.delta, "p_holm": v.p_adjusted} for v in decided],
            "more_seeds": more, "published": PUBLISHED}
  with atomic_path(stem + ".json") as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  return (out_path, *written, stem + ".json")


def _draw(out_path, levels):
  """Each row's seeds (grey) and its mean with the 95% interval (black)."""
  fig, ax = plt.subplots(figsize=(9, 4.5))
  for x, (row, (acc, interval)) in enumerate(levels.items()):
    ax.scatter([x] * len(acc), acc, color="grey", s=12, zorder=3)
    if interval is not None:
      mean = float(np.nanmean(acc))
      ax.errorbar([x], [mean], yerr=[[mean - interval[0]], [interval[1] - mean]], color="k",
                  capsize=4, marker="_", markersize=16, zorder=4)
  ax.set_xticks(range(len(levels)), [label(r) for r in levels], rotation=30, ha="right")
  ax.set_ylabel("test accuracy (%): seeds, mean and 95% interval")
  ax.set_title("LRA ListOps at Skyformer's setting (L = 2,000)")
  ax.grid(alpha=0.3, axis="y")
  fig.tight_layout()
  save_figure(fig, out_path)
  plt.close(fig)


def _gate_line(gate):
  if gate is None:
    return "no gate (needs exact and identity runs with per-sequence test evals)."
  ev = gate.evidence
  if not np.isfinite(ev.se):
    return "undecided (needs >= 2 seeds of exact and identity)."
  low, high = ev.interval()
  return (f"exact beats identity by {100 * ev.diff:.2f} pp (95% {100 * low:.2f} .. "
          f"{100 * high:.2f}, MDE {100 * ev.mde():.2f}): {'passed' if gate.passed else 'failed'}.")
