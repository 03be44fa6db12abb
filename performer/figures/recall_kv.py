"""Recall beyond the trained pairs: the confirmatory study of recall_conv's rows at kv = 8 and 16.

Claims declared before the runs (docs/ARCHITECTURE.md, plans/recall_kv.py); fresh seeds decide."""

import json
import os

import matplotlib.pyplot as plt
import numpy as np

from performer import verdicts
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import claims as claims_lib
from performer.figures import recall, recall_claims, recall_runs
from performer.figures import runs as runs_lib
from performer.figures.io import check_figure_path, save_figure
from performer.figures.recall_runs import label
from performer.figures.tables import Column, write_table

NAME = "recall-kv"  # performer figure NAME
SUMMARY = "MQAR recall against kv (4, 8, 16) and the confirmatory kv = 8/16 verdicts (--runs)"
READS = "runs"  # render(run folders, out)

SPLITS = ("test_kv8", "test_kv16")  # the declared splits; test (kv = 4, as trained) is drawn
FAMILY = "recall_kv"  # one Holm family: every claim at every split
# recall_conv's delta (0.05 x exact's 96.46 pp gain over identity at kv = 4, seeds 0-2),
# fixed before this study's runs rather than re-measured on them.
DELTA = 0.0482
DELTA_SOURCE = "recall_conv's delta: 0.05 x exact's gain over identity at kv = 4 (96.46 pp)"
MOST_SEEDS = 8
ROWS = ("exact", "favor_m256", "favor_m1024", "favorpp", "favorsharp", "trig", "taylor", "relu",
        "identity")
# (id, text, kind, a, b), each decided at every split. {ref} is FAVOR+ at the variants' m (256
# in the mini budget), {top} FAVOR+ at the largest m run (1,024).
DECLARED = (
    ("FAVOR++ better than FAVOR+", "GERF's lower kernel variance gives better attention "
     "(Likhosherstov et al. 2022)", "better", "favorpp", "{ref}"),
    ("FAVOR# better than FAVOR+", "SADERF's lower kernel variance gives better attention "
     "(Likhosherstov et al. 2023)", "better", "favorsharp", "{ref}"),
    ("trig worse than positive", "trigonometric features train unstably; positive ones do not "
     "(Sec. 4.2, Fig. 5)", "worse", "trig", "{ref}"),
    ("FAVOR+ m={m} matches exact", "FAVOR+ softmax attention matches exact attention (Sec. 4, "
     "Fig. 6: 'nearly identical')", "matches", "{top}", "exact"),
    ("Taylor matches exact", "Based's Taylor map recalls as softmax attention does (Arora et al. "
     "2024, Fig. 3)", "matches", "taylor", "exact"),
    ("ReLU matches FAVOR+", "generalized ReLU attention is as good as softmax (Table 2)",
     "matches", "relu", "{ref}"),
)
CLAIM_COLUMNS = (Column("claim"), Column("split"), Column("paper"), Column("difference (pp)"),
                 Column("95% interval (pp)"), Column("MDE (pp)"), Column("delta (pp)"),
                 Column("seeds"), Column("verdict"), Column("why"))


def claims(rows, splits=SPLITS):
  """The declared verdicts.Claims whose rows were run: each of DECLARED at each split, the split
  as the claim's direction (its scale gate: exact against identity on that split)."""
  ms = sorted(int(r.removeprefix("favor_m")) for r in rows if r.startswith("favor_m"))
  ref = recall_claims.reference(rows)
  names = {"ref": f"favor_m{ref}", "top": f"favor_m{ms[-1]}" if ms else ""}
  out = []
  for split in splits:
    for cid, text, kind, a, b in DECLARED:
      a, b = a.format(**names), b.format(**names)
      if a in rows and b in rows:
        out.append(verdicts.Claim(
            id=f"{cid.format(m=ms[-1] if ms else '')} at {_kv(split)}", text=text, kind=kind,
            a=a, b=b, metric="accuracy", split=split, delta=DELTA, delta_source=DELTA_SOURCE,
            family=FAMILY, direction=split))
  return out


def _kv(split):
  return f"kv = {split.removeprefix('test_kv')}"


def evidence(rows, splits=SPLITS, *, bootstrap=verdicts.BOOTSTRAP):
  """({claim id: (Replicates a, Replicates b, paired, Evidence)}, {split: Gate}, {claim id: why
  not}) of one task's rows ({row: [runs]}), seeds paired as recall_claims.decide pairs them."""
  gates, found, notes = {}, {}, {}
  for split in splits:
    if "exact" in rows and "identity" in rows:
      (exact, _), (control, _) = (claims_lib.replicates(rows[r], split)
                                  for r in ("exact", "identity"))
      if exact is not None and control is not None:
        gates[split] = verdicts.gate(split, exact, control, bootstrap=bootstrap)
  for claim in claims(rows, splits):
    (runs_a, runs_b), pairs = claims_lib.paired_runs(rows, claim.a, claim.b)
    (ra, why_a), (rb, why_b) = (claims_lib.replicates(g, claim.split) for g in (runs_a, runs_b))
    if ra is None or rb is None:
      notes[claim.id] = why_a or why_b
    elif len({recall_runs.planned(r) for r in runs_a + runs_b}) != 1:
      notes[claim.id] = f"{label(claim.a)} and {label(claim.b)} were evaluated at different steps"
    else:
      found[claim.id] = (ra, rb, pairs, verdicts.estimate(ra, rb, bootstrap=bootstrap,
                                                          paired_seeds=pairs))
  return found, gates, notes


def decide(rows, splits=SPLITS, *, bootstrap=verdicts.BOOTSTRAP):
  """(verdicts in claims() order, {split: Gate}) on one task's rows; a claim whose split has no
  gate (no exact and identity evals there) is not tested."""
  found, gates, notes = evidence(rows, splits, bootstrap=bootstrap)
  declared = claims(rows, splits)
  for claim in declared:
    if claim.direction not in gates:
      notes[claim.id] = f"needs exact and identity runs with per-sequence {claim.split} evals"
  decided = verdicts.decide(declared, {c: found[c][3] for c in found if c not in notes}, gates)
  return [v if v.claim.id not in notes else verdicts.Verdict(v.claim, verdicts.NOT_TESTED,
                                                             notes[v.claim.id])
          for v in decided], gates


def design(rows, *, most=MOST_SEEDS, bootstrap=verdicts.BOOTSTRAP):
  """The seeds design from a look at earlier runs (recall_conv's seeds 0-3, which decide
  nothing here): per claim, the look's difference and, at the Holm level the claim is first
  tested at (ALPHA / the family's size, verdicts.holm_level before any run), the fewest paired
  seeds whose projected MDE is under delta and under the look's |difference| (None: more than
  `most`); and the seeds declared: the most any estimator claim (FAVOR++, FAVOR# better) needs
  to detect the look's difference, `most` where that is more.

  Returns:
    {"level", "seeds", "claims": [{...}]} (JSON-ready; differences as fractions).
  """
  found, _, _ = evidence(rows, bootstrap=bootstrap)
  level = verdicts.ALPHA / len(claims(rows))
  out = []
  for claim in claims(rows):
    if claim.id not in found:
      continue
    a, b, pairs, ev = found[claim.id]
    need = lambda effect: verdicts.seeds_for(a, b, ev, effect, most, paired_seeds=pairs,
                                             alpha=level)
    out.append({"claim": claim.id, "difference": ev.diff, "interval": list(ev.interval()),
                "seeds_seen": list(ev.seeds), "mde_at_level": ev.mde(level),
                "seeds_for_delta": need(claim.delta), "seeds_for_difference": need(abs(ev.diff))})
  estimators = [c["seeds_for_difference"] for c in out
                if c["claim"].startswith(("FAVOR++", "FAVOR#"))]
  seeds = max((most if n is None else n) for n in estimators) if estimators else None
  return {"level": level, "delta": DELTA, "most": most, "seeds": seeds, "claims": out}


def _rows(loaded):
  """(task, {row: [runs by seed]}) of one task (recall._by_task's checks), ROWS' rows first.

  Raises:
    UserError: runs of more than one task.
  """
  tasks = recall._by_task(loaded)  # pylint: disable=protected-access
  if len(tasks) != 1:
    raise UserError(f"recall-kv reads the runs of one task, got {', '.join(tasks)}")
  task, rows = next(iter(tasks.items()))
  order = [r for r in ROWS if r in rows] + [r for r in rows if r not in ROWS]
  return task, {r: rows[r] for r in order}


def render(run_dirs, out_path):
  """Writes the figure (accuracy against kv per row, each split's no-binding ceiling) to
  out_path and <stem>.md/.csv (rows), <stem>_claims.md/.csv, <stem>_mechanism.md/.csv (if the
  runs were probed) and <stem>.json beside it; returns the paths.

  Raises:
    UserError: an unwritable path, runs of several tasks or of another study, or any
      runs.load_runs error.
  """
  task, rows = _rows(runs_lib.load_runs(run_dirs))
  check_figure_path(out_path)
  stem = os.path.splitext(out_path)[0]
  beyond = sorted({s for g in rows.values() for r in g for s in r.evals if s.startswith("test_kv")},
                  key=lambda s: int(s.removeprefix("test_kv")))
  splits = ("test", *beyond)
  first = next(iter(rows.values()))[0]
  ceilings = recall_runs.ceilings(first, splits)
  kvs = [int(recall.task_key(task)[1]), *(int(s.removeprefix("test_kv")) for s in beyond)]
  means = {row: [_mean_interval(group, s) for s in splits] for row, group in rows.items()}
  row_cells = [[label(row), len(group), *(m for m, _ in means[row]),
                *(_text(i) for _, i in means[row])] for row, group in rows.items()]
  decided, gates = decide(rows, beyond)
  claim_cells = []
  for v in decided:
    cells = verdicts.row(v)
    claim_cells.append([v.claim.id, v.claim.split, v.claim.text, cells["difference (pp)"],
                        cells["95% interval (pp)"], cells["MDE (pp)"], cells["delta (pp)"],
                        cells["seeds"], v.verdict, v.reason])
  mechanism_cells = _mechanism(rows)
  _draw(out_path, task, rows, means, kvs, splits, ceilings)
  gate_notes = [_gate_note(s, gates.get(s)) for s in beyond]
  ceiling_notes = [recall_runs.ceiling_note(task, s, c) for s, c in ceilings.items()]
  columns = (Column("row"), Column("seeds"), *(Column(f"{s} % (mean)", "{:.2f}") for s in splits),
             *(Column(f"{s} 95% interval") for s in splits))
  written = [*write_table(stem + ".md", "Recall beyond the trained pairs: test accuracy per row",
                          columns, row_cells, [
                              "Accuracy % over the query positions of each fixed split (test: "
                              f"kv = {kvs[0]}, as trained; test_kv<n>: n pairs); the 95% "
                              "interval from the seeds (t) and the split (bootstrap), "
                              "verdicts.level.", *ceiling_notes]),
             *write_table(stem + "_claims.md", "Recall beyond the trained pairs: the declared "
                          "claims, decided by the verdict rule", CLAIM_COLUMNS, claim_cells, [
                              *gate_notes, f"One Holm family ({FAMILY}): every claim at every "
                              f"split. Delta {100 * DELTA:.2f} pp ({DELTA_SOURCE}), declared "
                              "before the runs. Seeds paired (a t interval over per-seed "
                              "differences) plus a paired bootstrap over the split's examples. "
                              "The claims: performer/figures/recall_kv.py; the rule: "
                              "performer/verdicts.py."])]
  if mechanism_cells:
    written += write_table(stem + "_mechanism.md", "What FAVOR does on the models' own queries "
                           f"and keys at kv = {kvs[-1]}", recall.MECHANISM_COLUMNS[1:],
                           mechanism_cells, [
                               "performer recall-rows --split test_kv<largest> on each replicate "
                               "(experiments/recall_rows.py), means over seeds, as "
                               "recall_conv_mechanism.md at kv = 4."])
  record = {"task": task, "rows": {row: {s: {"mean": m, "interval": i}
                                         for s, (m, i) in zip(splits, values)}
                                   for row, values in means.items()},
            "gates": {s: claims_lib.gate_record(g) for s, g in gates.items()},
            "no_binding_ceiling": ceilings,
            "claims": [{"id": v.claim.id, "split": v.claim.split, "verdict": v.verdict,
                        "reason": v.reason, "difference": v.evidence.diff if v.evidence else None,
                        "interval": list(v.evidence.interval())
                        if v.evidence and np.isfinite(v.evidence.se) else None,
                        "p_holm": v.p_adjusted} for v in decided]}
  with atomic_path(stem + ".json") as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  return (out_path, *written, stem + ".json")


def _mechanism(rows):
  """The mechanism table's cells: each probed row's recall_rows.json means over its seeds."""
  cells = []
  for row, group in rows.items():
    probed = [m for m in map(recall_runs.mechanism, group) if m is not None]
    if probed:
      cells.append([label(row), len(probed), *(
          (100 if k.startswith("accuracy") else 1) * float(np.mean([m[k] for m in probed]))
          for k in recall_runs.MECHANISM)])
  return cells


def _draw(out_path, task, rows, means, kvs, splits, ceilings):
  """Accuracy against kv, one line per row (mean and 95% interval), and each split's ceiling."""
  fig, ax = plt.subplots(figsize=(8, 5))
  styles = recall.styles_of(rows)
  for k, (row, values) in enumerate(means.items()):
    style = styles.get(row, {"color": "k" if row.startswith("favor_m") else "grey",
                             "marker": "o"})
    ys = [m for m, _ in values]
    err = [[(m - i[0]) if m is not None and i else 0 for m, i in values],
           [(i[1] - m) if m is not None and i else 0 for m, i in values]]
    xs = [kv * recall.DODGE ** (k - len(means) / 2) for kv in kvs]
    ax.errorbar(xs, [np.nan if y is None else y for y in ys], yerr=err, capsize=3,
                label=label(row), linestyle="-" if row != "identity" else "--", **style)
  if ceilings:
    ax.plot(kvs, [100 * ceilings[s]["ceiling"] if s in ceilings else np.nan for s in splits],
            color="grey", linestyle=":", marker="_", markersize=14,
            label="no-binding ceiling of each split (rule)")
  ax.set_xscale("log", base=2)
  ax.set_xticks(kvs, [str(kv) for kv in kvs])
  ax.set_xlabel("key-value pairs in the test sequence (models trained at kv = 4)")
  ax.set_ylabel("test accuracy (%), mean and 95% interval")
  ax.set_ylim(-2, 102)
  ax.grid(alpha=0.3)
  ax.set_title(f"MQAR {task}: recall beyond the trained pairs")
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
  fig.tight_layout()
  save_figure(fig, out_path)
  plt.close(fig)


def _mean_interval(group, split):
  """(mean %, (low %, high %) or None) of a row's seeds on one split (verdicts.level, cut to
  0 .. 100%); (None, None) without per-sequence evals there."""
  reps, _ = claims_lib.replicates(group, split)
  if reps is None:
    return None, None
  ev = verdicts.level(reps)
  if not np.isfinite(ev.se):
    return 100 * ev.diff, None
  low, high = ev.interval()
  return 100 * ev.diff, (100 * max(low, 0.0), 100 * min(high, 1.0))


def _text(interval):
  return "-" if interval is None else f"{interval[0]:.2f} .. {interval[1]:.2f}"


def _gate_note(split, gate):
  if gate is None:
    return f"{split}: no gate (needs exact and identity runs with per-sequence {split} evals)."
  return recall_runs.gate_note(split, claims_lib.gate_record(gate))
