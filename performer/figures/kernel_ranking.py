"""Fig. 17 (App. D.3): Fig. 16's kernels ranked at two batch sizes, and how far the batch moves them.

The rule was declared before the runs (docs/ARCHITECTURE.md, "plans/fig17.py")."""

import itertools
import json
import os

import numpy as np
from scipy import stats

from performer import favor, verdicts
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import runs
from performer.figures.claims import replicates
from performer.figures.kernels import kernel_of, renormalized
from performer.figures.tables import Column, csv_path, write_table

NAME = "kernel-ranking"  # performer figure NAME
SUMMARY = "Fig. 17 the kernels ranked at two batch sizes: rank correlation, flips, verdict (--runs)"
READS = "runs"  # render(run folders, out)
TABLE = True
OUT = "fig17_ranking.md"  # in the first run's parent folder
CLAIM = ("the effective batch size slightly affects the rankings (App. D.3, Figs. 16-17: 2x2 "
         "against 4x4 TPU-v2)")
LEAST_KERNELS = 3  # a rank correlation of fewer says nothing


def render(run_dirs, out_path):
  """Ranks the kernels by mean test accuracy at each of two batch sizes and decides the claim.

  The rule (declared before the runs): rho is Spearman's correlation of the two rankings, its 95%
  interval from a bootstrap that resamples each group's seeds and the shared test sequences. A
  pair of kernels is ordered at a batch when their difference (verdicts.estimate: seeds and test
  set) is nonzero at Holm-adjusted level ALPHA over the pairs of that batch; it flips when it is
  ordered at both batches in opposite directions. Reproduced: rho's interval above 0 and at
  least one flip. Contradicted: rho's interval below 0 (more than slightly), or every pair
  ordered at both batches and none flips (not at all). Otherwise inconclusive; fewer than
  LEAST_KERNELS kernels with numbers at both batches: not testable at this scale.

  Args:
    run_dirs: renormalized generalized-attention runs evaluated on test (per-sequence sums), of
      exactly two DataConfig.batch_size values.
    out_path: the .md table; its .csv and .json twins go beside it.

  Returns:
    out_path.

  Raises:
    UserError: out_path not a writable .md path; a run without a feature kernel or without
      D^-1; not two batch sizes.
  """
  csv_path(out_path)  # a wrong --out fails before reading
  groups = _groups(runs.load_runs(run_dirs))
  batches = sorted({b for b, _ in groups})
  if len(batches) != 2:
    raise UserError(f"{', '.join(run_dirs)}: runs of {len(batches)} batch size(s) "
                    f"({', '.join(map(str, batches)) or 'none'}); give runs of exactly two")
  reps, excluded = {}, []
  for kernel in sorted({k for _, k in groups}, key=favor.KERNELS.index):
    found = {b: replicates(groups.get((b, kernel), [])) if (b, kernel) in groups
             else (None, f"no run at batch {b}") for b in batches}
    why = "; ".join(w for _, w in found.values() if w)
    if why:
      excluded.append((kernel, why))
    else:
      reps[kernel] = [found[b][0] for b in batches]
  decision = decide(reps, batches)
  _write(out_path, decision, excluded)
  return out_path


def _groups(loaded):
  """{(batch size, kernel): [runs]}; refuses runs the ranking cannot use."""
  out = {}
  for run in loaded:
    if run.attention == "identity":
      raise UserError(f"{run.path}: identity attention has no kernel to rank")
    kernel = kernel_of(run)
    if not renormalized(run):
      raise UserError(f"{run.path}: runs without D^-1 are not ranked (Figs. 16-17 rank the "
                      "renormalized kernels)")
    batch = (run.config.get("data") or {}).get("batch_size")
    out.setdefault((batch, kernel), []).append(run)
  return out


def decide(reps, batches, *, bootstrap=verdicts.BOOTSTRAP, alpha=verdicts.ALPHA):
  """The declared rule on {kernel: [Replicates at batches[0], at batches[1]]}; a JSON-ready dict.

  Raises:
    UserError: groups scored on different numbers of test sequences.
  """
  kernels = list(reps)
  out = {"claim": CLAIM, "batches": list(batches), "kernels": kernels, "alpha": alpha,
         "bootstrap": bootstrap}
  if len({r.correct.shape[1] for pair in reps.values() for r in pair}) > 1:
    raise UserError("the runs were scored on different test sequences; evaluate them on one split")
  means = np.array([[r.accuracy().mean() for r in reps[k]] for k in kernels]).reshape(-1, 2)
  out["accuracy"] = {k: [float(a) for a in means[i]] for i, k in enumerate(kernels)}
  if len(kernels) < LEAST_KERNELS:
    out.update(rho=None, interval=None, pairs=[], verdict="not testable at this scale",
               why=f"{len(kernels)} kernel(s) with numbers at both batches; the rule needs "
                   f"{LEAST_KERNELS}")
    return out
  out["ranks"] = {k: [float(x) for x in row] for k, row in
                  zip(kernels, np.stack([stats.rankdata(-means[:, j]) for j in (0, 1)], 1))}
  out["rho"] = float(stats.spearmanr(means[:, 0], means[:, 1]).statistic)
  low, high = np.nanpercentile(_bootstrap_rho(reps, bootstrap), [2.5, 97.5])
  out["interval"] = [float(low), float(high)]
  out["pairs"] = _pairs(reps, alpha)
  flips = [p for p in out["pairs"] if p["flips"]]
  ordered_everywhere = all(all(p["ordered"]) for p in out["pairs"])
  if low > 0 and flips:
    out["verdict"], out["why"] = verdicts.REPRODUCED, (
        f"rho's interval is above 0 and {len(flips)} pair(s) flip")
  elif high < 0:
    out["verdict"], out["why"] = verdicts.CONTRADICTED, "the rankings disagree (rho below 0)"
  elif ordered_everywhere and not flips:
    out["verdict"], out["why"] = verdicts.CONTRADICTED, (
        "every pair is ordered at both batches and none flips")
  else:
    out["verdict"], out["why"] = verdicts.INCONCLUSIVE, (
        f"rho's interval {'includes' if low <= 0 else 'is above'} 0; {len(flips)} pair(s) "
        f"flip; {sum(not all(p['ordered']) for p in out['pairs'])} of {len(out['pairs'])} "
        "pairs are not ordered at both batches")
  return out


def _bootstrap_rho(reps, bootstrap, seed=0):
  """[bootstrap] Spearman rho with each group's seeds and the shared test sequences resampled."""
  rng = np.random.default_rng(seed)
  n = next(iter(reps.values()))[0].correct.shape[1]
  index = rng.integers(0, n, (bootstrap, n))
  means = np.empty((len(reps), 2, bootstrap))
  for i, pair in enumerate(reps.values()):
    for j, r in enumerate(pair):
      per_seed = r.accuracy(index)  # [seeds, bootstrap]
      picks = rng.integers(0, r.seeds, (bootstrap, r.seeds))
      means[i, j] = per_seed[picks, np.arange(bootstrap)[:, None]].mean(axis=1)
  ranks = stats.rankdata(-means, axis=0)  # [kernels, 2, bootstrap]
  a, b = ranks[:, 0] - ranks[:, 0].mean(0), ranks[:, 1] - ranks[:, 1].mean(0)
  with np.errstate(invalid="ignore", divide="ignore"):
    return (a * b).sum(0) / np.sqrt((a * a).sum(0) * (b * b).sum(0))


def _pairs(reps, alpha):
  """Each pair of kernels: its difference at each batch, ordered at Holm level, and whether it
  flips."""
  pairs = list(itertools.combinations(reps, 2))
  evidence = [[verdicts.estimate(reps[a][j], reps[b][j]) for a, b in pairs] for j in (0, 1)]
  adjusted = [verdicts.holm([_two_sided_p(e) for e in evidence[j]]) for j in (0, 1)]
  out = []
  for i, (a, b) in enumerate(pairs):
    diffs = [evidence[j][i].diff for j in (0, 1)]
    ordered = [bool(adjusted[j][i] < alpha) for j in (0, 1)]
    out.append({"a": a, "b": b, "difference": diffs,
                "interval": [[float(x) for x in evidence[j][i].interval()] for j in (0, 1)],
                "holm_p": [float(adjusted[j][i]) for j in (0, 1)], "ordered": ordered,
                "flips": bool(all(ordered) and np.sign(diffs[0]) != np.sign(diffs[1]))})
  return out


def _two_sided_p(evidence):
  """The p-value of a nonzero difference: a t test on the seeds and test set; 1 without a seed
  interval (one seed), and exact (0 or 1) when the replicates agree exactly."""
  if evidence.se == 0:
    return float(evidence.diff == 0)
  if not evidence.se > 0 or evidence.df != evidence.df:
    return 1.0
  return float(2 * stats.t(evidence.df).sf(abs(evidence.diff) / evidence.se))


def _write(out_path, decision, excluded):
  """The table (.md, .csv) and its JSON twin, each atomically."""
  batches = decision["batches"]
  columns = (Column("kernel"), *(c for b in batches for c in (
      Column(f"accuracy at batch {b} (%)", "{:.2f}"), Column(f"rank at batch {b}", "{:g}"))))
  ranks = decision.get("ranks", {})
  rows = [[favor.kernel(k).label, *(x for j in (0, 1) for x in (
      100 * decision["accuracy"][k][j], ranks[k][j] if k in ranks else None))]
          for k in decision["kernels"]]
  notes = [f"Claim: {CLAIM}.", f"Verdict: {decision['verdict']} ({decision['why']})."]
  if decision.get("rho") is not None:
    low, high = decision["interval"]
    notes.append(f"Spearman rho {decision['rho']:.3f} (95% interval {low:.3f} .. {high:.3f}; "
                 "seeds and test sequences resampled).")
    for p in decision["pairs"]:
      if p["flips"]:
        notes.append(f"Flips: {p['a']} - {p['b']} "
                     f"{100 * p['difference'][0]:+.2f} pp at batch {batches[0]}, "
                     f"{100 * p['difference'][1]:+.2f} pp at batch {batches[1]}.")
  notes += [f"Not ranked: {k} ({why})." for k, why in excluded]
  write_table(out_path, "Fig. 17: the kernels ranked at two batch sizes", columns, rows, notes)
  with atomic_path(os.path.splitext(out_path)[0] + ".json") as tmp, open(tmp, "w") as f:
    json.dump({**decision, "excluded": [{"kernel": k, "why": w} for k, w in excluded]}, f,
              indent=1)
