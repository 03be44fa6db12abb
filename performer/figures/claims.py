"""The paper's protein claims (Sec. 4.3, Fig. 6, Table 2) checked on our run folders.

One row per claim: the paper's evidence, ours, the tolerance, a verdict
(reproduced, reproduced in part, not reproduced, not tested) and a one-line
reason. Ours are mean test accuracies (%) over the seeds of each (direction,
model) that have an eval_test.json (runs.py reads them, as for Table 2).

Tolerance: tol = the run-to-run spread, the largest (max - min) test accuracy
over seeds of any (direction, model) with >= 2 evaluated seeds, in
percentage points; with no such model, tol = 0 and every reason says "no
seed spread measured".

Rules:
  a. "Performer-softmax matches the Transformer": in each direction with
     both, they match if |softmax - Transformer| <= tol. Both directions
     match: reproduced; one: in part; none: not reproduced; no direction
     with both: not tested.
  b. "Performer-ReLU is the best": in each direction with Performer-ReLU and
     another of the paper's Fig. 6 models (extras are not compared), ReLU is
     best if above every other by more than tol, tied if within tol of the
     best other, else not. Best in every tested direction: reproduced; best
     or tied in any: in part; else not reproduced; none tested: not tested.
  c. "Reformer and Linformer drop in accuracy": Reformer (U) < Transformer
     (U) - tol, and Linformer (B) < Transformer (B) - tol; a part missing a
     model is not tested. Both hold: reproduced; one: in part; neither:
     not reproduced; no part tested: not tested.
  d. "OOD accuracy follows test accuracy": per direction, over the models
     with test and OOD evals (means over the seeds having both): (1) OOD <
     test for every model, and (2) the Spearman rank correlation of test vs
     OOD accuracy across models is >= 0.5 (needs >= 3 models; untested
     otherwise, which counts as not holding). Each must hold in every
     direction where it is tested. Both hold: reproduced; one: in part;
     none: not reproduced; no model with both evals: not tested.
"""

import numpy as np

from performer.figures import paper, runs
from performer.figures.tables import Column, csv_path, write_table

REPRODUCED, PART, NOT, UNTESTED = ("reproduced", "reproduced in part", "not reproduced",
                                   "not tested")
COLUMNS = (Column("claim"), Column("paper"), Column("ours"), Column("tolerance (pp)", "{:.2f}"),
           Column("verdict"), Column("reason"))
NO_SPREAD = "no seed spread measured"


def _accuracies(loaded, splits):
  """{(direction, label): [mean accuracy % per split]} over the seeds that have every split."""
  means = {}
  for key, group in runs.by_model(loaded).items():
    done = [r for r in group if all(s in r.evals for s in splits)]
    if done:
      means[key] = [100 * runs.mean(r.value(s, "accuracy") for r in done) for s in splits]
  return means


def tolerance(loaded):
  """(tol in percentage points, what it was measured on or None): the largest seed spread."""
  best = (0.0, None)
  for (direction, label), group in runs.by_model(loaded).items():
    accs = [100 * r.value("test", "accuracy") for r in group if "test" in r.evals]
    if len(accs) >= 2 and (best[1] is None or max(accs) - min(accs) > best[0]):
      best = (max(accs) - min(accs), f"({direction}) {label}, {len(accs)} seeds")
  return best


def spearman(x, y):
  """Spearman rank correlation of two equal-length sequences (ties: mean ranks); nan if constant."""
  rx, ry = _ranks(x), _ranks(y)
  if np.ptp(rx) == 0 or np.ptp(ry) == 0:
    return float("nan")
  return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values):
  values = np.asarray(values, np.float64)
  ranks = np.empty(len(values))
  ranks[np.argsort(values, kind="stable")] = np.arange(1, len(values) + 1)
  for v in np.unique(values):  # ties share their mean rank
    ranks[values == v] = ranks[values == v].mean()
  return ranks


def _paper(direction, model):
  """The paper's test accuracy % of a model (Table 2)."""
  return paper.TABLE2[(direction, model)]["test"][0]


def _verdict(held, tested, total):
  """REPRODUCED if all `total` parts hold, PART if some do, NOT if none; UNTESTED if none ran."""
  if not tested:
    return UNTESTED
  return REPRODUCED if held == total else PART if held else NOT


def _softmax_matches(acc, tol):
  parts, held, tested = [], 0, 0
  for d in runs.DIRECTIONS:
    t, s = acc.get((d, "Transformer")), acc.get((d, "Performer-softmax"))
    if t is None or s is None:
      parts.append((f"({d}) not run", f"({d}) needs Transformer and Performer-softmax"))
      continue
    tested += 1
    ok = abs(s - t) <= tol
    held += ok
    parts.append((f"({d}) {s:.2f} vs {t:.2f}",
                  f"({d}) |diff| {abs(s - t):.2f} {'<=' if ok else '>'} tol"))
  return ("Performer-softmax matches the Transformer",
          (f"(B) {_paper('B', 'Performer-softmax'):.2f} vs {_paper('B', 'Transformer'):.2f} "
           "(Table 2); (U) same accuracy (Fig. 6)"),
          "; ".join(p for p, _ in parts), _verdict(held, tested, 2),
          "; ".join(r for _, r in parts))


def _relu_best(acc, tol):
  parts, best, tied = [], 0, 0
  tested = 0
  for d, models in paper.FIG6.items():
    relu = acc.get((d, "Performer-ReLU"))
    others = {m: acc[(d, m)] for m in models if m != "Performer-ReLU" and (d, m) in acc}
    if relu is None or not others:
      parts.append((f"({d}) ReLU {relu:.2f}, no other model" if relu is not None
                    else f"({d}) ReLU not run",
                    f"({d}) not tested (needs ReLU and another Fig. 6 model)"))
      continue
    tested += 1
    rival = max(others, key=others.get)
    gap = relu - others[rival]
    outcome = "best" if gap > tol else "tied" if abs(gap) <= tol else "not best"
    best += outcome == "best"
    tied += outcome == "tied"
    parts.append((f"({d}) ReLU {relu:.2f} vs {rival} {others[rival]:.2f}",
                  f"({d}) {outcome}: {gap:+.2f} pp over the best other of {len(others)}"))
  verdict = (UNTESTED if not tested else REPRODUCED if best == tested
             else PART if best or tied else NOT)
  return ("Performer-ReLU is the best",
          (f"(U) {_paper('U', 'Performer-ReLU'):.2f} vs Transformer "
           f"{_paper('U', 'Transformer'):.2f}; (B) {_paper('B', 'Performer-ReLU'):.2f} vs "
           f"Transformer {_paper('B', 'Transformer'):.2f} (Table 2; Fig. 6)"),
          "; ".join(p for p, _ in parts), verdict, "; ".join(r for _, r in parts))


def _drop(acc, tol):
  parts, held, tested = [], 0, 0
  for d, model in (("U", "Reformer"), ("B", "Linformer")):
    t, x = acc.get((d, "Transformer")), acc.get((d, model))
    if t is None or x is None:
      parts.append((f"{model} ({d}) not run", f"{model} ({d}) vs Transformer not tested"))
      continue
    tested += 1
    ok = x < t - tol
    held += ok
    parts.append((f"{model} ({d}) {x:.2f} vs Transformer {t:.2f}",
                  (f"{model} ({d}) {'drops' if ok else 'does not drop'} "
                   f"({x - t:+.2f} pp, tol {tol:.2f})")))
  return ("Reformer and Linformer drop in accuracy", "Fig. 6 curves (no numbers)",
          "; ".join(p for p, _ in parts), _verdict(held, tested, 2),
          "; ".join(r for _, r in parts))


def _ood_follows(loaded):
  pairs = _accuracies(loaded, ("test", "ood"))
  below, ranked, parts = True, None, []
  for d in runs.DIRECTIONS:
    models = {label: v for (dd, label), v in pairs.items() if dd == d}
    if not models:
      continue
    lower = [m for m, (test, ood) in models.items() if not ood < test]
    below = below and not lower
    text = (f"({d}) OOD < test for all {len(models)}" if not lower
            else f"({d}) OOD >= test for {', '.join(lower)}")
    if len(models) >= 3:
      rho = spearman(*zip(*models.values()))
      ranked = (ranked is not False) and rho >= 0.5
      text += f"; Spearman {rho:.2f}"
    else:
      text += f"; rank correlation needs >= 3 models, has {len(models)}"
    parts.append(text)
  held = below + (ranked is True)
  theirs = "; ".join(f"({d}) {m} {v['test'][0]:.2f} -> {v['ood'][0]:.2f}"
                     for (d, m), v in paper.TABLE2.items() if m != "Empirical baseline")
  ours = "; ".join(f"({d}) {m} {v[0]:.2f} -> {v[1]:.2f}" for (d, m), v in pairs.items()) or "-"
  if not pairs:
    return ("OOD accuracy follows test accuracy", theirs, ours, UNTESTED,
            "no model has both eval_test.json and eval_ood.json")
  return ("OOD accuracy follows test accuracy", theirs, ours, _verdict(held, True, 2),
          "; ".join(parts))


def rows(loaded):
  """The claim rows [claim, paper, ours, tol, verdict, reason] for loaded Runs, and tol's source."""
  tol, source = tolerance(loaded)
  acc = {key: v[0] for key, v in _accuracies(loaded, ("test",)).items()}
  found = [_softmax_matches(acc, tol), _relu_best(acc, tol), _drop(acc, tol), _ood_follows(loaded)]
  table = []
  for claim, theirs, ours, verdict, reason in found:
    if source is None:
      reason += f"; {NO_SPREAD} (tol = 0)"
    table.append([claim, theirs, ours, tol, verdict, reason])
  return table, source


def _below_baseline(loaded):
  """A warning naming the models that do not beat the empirical baseline on test, if any."""
  below = sorted({f"({d}) {label}" for (d, label), group in runs.by_model(loaded).items()
                  for r in group if r.value("test", "accuracy") is not None
                  and r.value("test", "accuracy") <= (r.value("test", "baseline_accuracy") or 0)})
  if not below:
    return []
  return [f"Warning: {', '.join(below)} do not beat the empirical-frequency baseline on test; "
          "verdicts involving them compare models that learnt nothing beyond residue frequencies."]


def render(run_dirs, out_path):
  """Reads run folders and writes the claims table to out_path (Markdown) and its .csv twin.

  Returns:
    (markdown path, csv path).

  Raises:
    UserError: out_path is not a .md path or unwritable; any runs.load_runs error.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  loaded = runs.load_runs(run_dirs)
  table, source = rows(loaded)
  notes = [*_below_baseline(loaded),
      "Ours: mean test accuracy % over the seeds with an eval_test.json of each (direction, "
      "model); pp = percentage points. " + runs.SCORED,
      (f"Tolerance: the largest seed spread (max - min test accuracy), measured on {source}."
       if source else f"Tolerance: 0, {NO_SPREAD} (no model has two evaluated seeds)."),
      "Verdict rules: the docstring of performer/figures/claims.py.",
      ("Paper: Sec. 4.3 and Fig. 6 (36 layers, L = 1024), numbers from Table 2 (App. C.3); "
       "'Performer (generalized)' is Performer-ReLU.")]
  return write_table(out_path, "Paper claims on proteins, checked on our runs", COLUMNS, table,
                     notes)
