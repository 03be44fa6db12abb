"""Associative recall (MQAR): accuracy against the attention's state, and the paper's claims there.

Reads the recall study's archived runs (plans/recall.py); the claims are recall_claims.py's."""

import json
import os
import re

import matplotlib.pyplot as plt
import numpy as np

from performer import attention, verdicts
from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import claims as claims_lib
from performer.figures import recall_claims, recall_runs
from performer.figures import runs as runs_lib
from performer.figures.io import check_figure_path, save_figure
from performer.figures.recall_runs import LABELS, label, state_size
from performer.figures.tables import Column, write_table

NAME = "recall"  # performer figure NAME
SUMMARY = "MQAR recall accuracy against state size and m, with verdicts (--runs)"
READS = "runs"  # render(run folders, out)

TASK = re.compile(r"L(\d+)_kv(\d+)")  # a task's name, plans/recall.py task_name
DODGE = 1.035  # the factor between neighbouring markers of one state size on the log x axis
UNLUCKY = 0.5  # a seed below this fraction of its row's median accuracy is "unlucky"
ROW_COLUMNS = (Column("task"), Column("row"), Column("attention state per layer"),
               Column("test accuracy % (mean)", "{:.2f}"), Column("95% interval"),
               Column("min", "{:.2f}"),
               Column("max", "{:.2f}"), Column("seeds"), Column("unlucky seeds"),
               Column("learning rate", "{:g}"), Column("steps (median)", "{:.0f}"),
               Column("valid gain, last 1,000 steps (pp)", "{:.2f}"))
MECHANISM_COLUMNS = (Column("task"), Column("row"), Column("seeds"),
                     Column("accuracy with FAVOR's rows %", "{:.2f}"),
                     Column("with exact rows of the same q, k %", "{:.2f}"),
                     Column("row L1 (0..2)", "{:.3f}"), Column("weight on the answer: FAVOR",
                                                              "{:.3f}"),
                     Column("exact", "{:.3f}"), Column("largest weight: FAVOR", "{:.3f}"),
                     Column("exact ", "{:.3f}"))
CLAIM_COLUMNS = (Column("task"), Column("claim"), Column("paper"), Column("difference (pp)"),
                 Column("95% interval (pp)"), Column("MDE (pp)"), Column("delta (pp)"),
                 Column("seeds"), Column("verdict"), Column("why"))


def _by_task(loaded):
  """{task: {row: [runs by seed]}}.

  Raises:
    UserError: a run without the recall study's settings, or with malformed
      ones, or one neither evaluated on test nor diverged; two runs of one
      task, row and seed; runs of one task on other data or with and without
      the short convolution (two studies mixed, e.g. recall_* and
      recall_conv_* archives).
  """
  out, seen, setting = {}, {}, {}
  for run in loaded:
    task, row = run.settings.get("task"), run.settings.get("row")
    if not task or not row:
      raise UserError(f"{run.path}: not a recall run (its config.json records no task and row; "
                      "runs of performer reproduce --only recall do, docs/reproducing.md says "
                      "how to record them by hand)")
    check_settings(run.path, task, row)
    if "test" not in run.evals and not run.failed:
      raise UserError(f"{run.path}: no eval_test.json (run performer eval --split test)")
    other = seen.setdefault((task, row, run.seed), run.path)
    if other != run.path:
      raise UserError(f"{run.path} and {other}: both are {task} {row} seed {run.seed}; give "
                      "each run once (two studies mixed?)")
    data, conv = recall_runs.data_fingerprint(run), bool(run.config["model"].get("conv_kernel"))
    first_data, first_conv, first = setting.setdefault(task, (data, conv, run.path))
    other_data = data is not None and first_data is not None and data != first_data
    if other_data or conv != first_conv:
      raise UserError(f"{run.path} and {first}: {task} runs on other data or with and without "
                      "the short convolution; render each study on its own")
    out.setdefault(task, {}).setdefault(row, []).append(run)
  # Rows in the study's declared order, not the runs' (a glob puts favor_m128 before favor_m16).
  return {t: {r: sorted(rows[r], key=lambda run: run.seed)
              for r in sorted(rows, key=recall_runs.row_key)}
          for t, rows in sorted(out.items(), key=lambda kv: task_key(kv[0]))}


def check_settings(path, task, row):
  """Raises UserError unless `task` reads 'L<seq_len>_kv<num_kv>' and `row` is one of the study's
  rows (plans/recall.py: LABELS' names or 'favor_m<m>')."""
  if not TASK.fullmatch(str(task)):
    raise UserError(f"{path}: recorded task {task!r} is not L<seq_len>_kv<num_kv>, e.g. L64_kv4")
  if row not in LABELS and not re.fullmatch(r"favor_m\d+", str(row)):
    raise UserError(f"{path}: recorded row {row!r} is not a row of the recall study (one of "
                    f"favor_m<m>, {', '.join(LABELS)})")


def task_key(task):
  """(L, kv) of a task name that check_settings accepted."""
  length, kv = TASK.fullmatch(task).groups()
  return int(length), int(kv)


def _accuracy(group, split="test"):
  return np.array([run.value(split, "accuracy") if run.value(split, "accuracy") is not None
                   else np.nan for run in group])


def render(run_dirs, out_path):
  """Writes the figure to out_path and <stem>.md/.csv/.json beside it; returns the paths.

  Raises:
    UserError: an unwritable path, a run that is not a recall run, or any
      runs.load_runs error.
  """
  tasks = _by_task(runs_lib.load_runs(run_dirs))
  check_figure_path(out_path)  # after the runs: a refused run leaves no new folder behind
  stem = os.path.splitext(out_path)[0]
  row_cells, claim_cells, mechanism_cells, ceiling_notes, more_notes = [], [], [], [], []
  record = {"tasks": {}}
  extra = sorted({s for rows in tasks.values() for g in rows.values() for r in g for s in r.evals
                  if s.startswith("test_")}, key=_split_key)
  # One row of panels per test length and kv: the task's own test, then test_kv<n>.
  drawn = ["test", *(s for s in extra if s.startswith("test_kv"))]
  panels = len(tasks) * len(drawn)
  fig, axes = plt.subplots(panels, 2, figsize=(13, 4.6 * panels), squeeze=False)
  axes = iter(axes)
  for task, rows in tasks.items():
    means = {}
    for row, group in rows.items():
      means[row] = _row(task, row, group, extra, row_cells, mechanism_cells)
    ceiling = recall_runs.ceilings(next(iter(rows.values()))[0], ("test", *extra))
    ceiling_notes += [recall_runs.ceiling_note(task, s, c) for s, c in ceiling.items()]
    for split in drawn:
      split_means = means if split == "test" else {
          row: _split_mean(group, split) for row, group in rows.items()}
      _draw(*next(axes), _title(task, split), rows, split_means, ceiling.get(split))
    decided, gate, more = recall_claims.decide(task, rows)
    more_notes.append(recall_claims.more_note(task, more))
    for v in decided:
      cells = verdicts.row(v)
      claim_cells.append([task, v.claim.id, v.claim.text, cells["difference (pp)"],
                          cells["95% interval (pp)"], cells["MDE (pp)"],
                          cells["delta (pp)"] if v.claim.direction else "", cells["seeds"],
                          v.verdict, v.reason])
    record["tasks"][task] = {
        "gate": claims_lib.gate_record(gate) if gate else None, "no_binding_ceiling": ceiling,
        "rows": {row: {"mean": m, "accuracies": list(map(float, a))}
                 for row, (m, a) in means.items()},
        "claims": [{"id": v.claim.id, "verdict": v.verdict, "reason": v.reason,
                    "difference": v.evidence.diff if v.evidence else None} for v in decided],
        "more_seeds": more}
  fig.tight_layout()
  save_figure(fig, out_path)
  plt.close(fig)
  notes = [recall_runs.gate_note(t, r["gate"]) for t, r in record["tasks"].items()]
  columns = (*ROW_COLUMNS, *(Column(f"{s} % (mean)", "{:.2f}") for s in extra))
  written = _tables(stem, columns, row_cells, claim_cells, mechanism_cells,
                    [*ceiling_notes, *notes], [*notes, *more_notes])
  with atomic_path(stem + ".json") as tmp, open(tmp, "w") as f:
    json.dump(record, f, indent=1)
  return (out_path, *written, stem + ".json")


def _row(task, row, group, extra, row_cells, mechanism_cells):
  """Appends one row's cells (and its mechanism cells, if probed); returns (mean %, the finite
  accuracies %) of its seeds on test."""
  acc = 100 * _accuracy(group)
  finite = acc[np.isfinite(acc)]
  mean = float(finite.mean()) if finite.size else None
  median = float(np.median(finite)) if finite.size else 0.0
  unlucky = [run.seed for run, a in zip(group, acc) if not a >= UNLUCKY * median]
  row_cells.append([task, label(row), state_size(group[0]), mean, _interval(group),
                    float(finite.min()) if finite.size else None,
                    float(finite.max()) if finite.size else None, len(group),
                    ", ".join(map(str, unlucky)) or "-", group[0].settings.get("lr"),
                    _median([run.step for run in group]),
                    _mean([recall_runs.last_gain(run) for run in group]),
                    *(_mean([100 * run.value(s, "accuracy") if run.value(s, "accuracy")
                             is not None else None for run in group]) for s in extra)])
  probed = [m for m in map(recall_runs.mechanism, group) if m is not None]
  if probed:
    mechanism_cells.append([task, label(row), len(probed), *(
        (100 if k.startswith("accuracy") else 1) * float(np.mean([m[k] for m in probed]))
        for k in recall_runs.MECHANISM)])
  return mean, finite


def _split_mean(group, split):
  """(mean %, the finite accuracies %) of a row's seeds on one test split."""
  acc = 100 * _accuracy(group, split)
  finite = acc[np.isfinite(acc)]
  return (float(finite.mean()) if finite.size else None), finite


def _title(task, split):
  """'L64_kv4', or 'L64_kv4 model on test_kv16 (kv = 16)' for another split's panels."""
  if split == "test":
    return task
  return f"{task} model on {split} (kv = {split.removeprefix('test_kv')})"


def _interval(group):
  """The 95% interval of a row's mean test accuracy (verdicts.level: its seeds and the test
  set), as text, cut to 0 .. 100%; '-' without two seeds of per-sequence sums."""
  reps, _ = claims_lib.replicates(group)
  if reps is None or reps.seeds < 2:
    return "-"
  low, high = verdicts.level(reps).interval()
  return f"{100 * max(low, 0.0):.2f} .. {100 * min(high, 1.0):.2f}"


def _tables(stem, columns, row_cells, claim_cells, mechanism_cells, row_notes, claim_notes):
  """Writes the rows, claims and (if any) mechanism tables; returns their paths."""
  rows_md = write_table(stem + ".md", "Associative recall (MQAR): test accuracy per row",
                        columns, row_cells, [
                            "Accuracy over the query positions of the fixed test set, in %; "
                            "its 95% interval from the seeds (t) and the test set (bootstrap, "
                            "verdicts.level); min and max over seeds. Unlucky: seeds below "
                            f"{UNLUCKY:g} x the row's median. Steps: where the runs were "
                            "evaluated (an early stop at 99% valid accuracy, or the cap); valid "
                            "gain: valid accuracy at the last eval minus "
                            f"{recall_runs.CLIMB:,} steps before "
                            "(a row still climbing at the cap has a positive gain). Other test "
                            "splits (data/mqar.py): test_shuffled holds test's examples with the "
                            "keys reassigned to the query slots at random; test_kv<n> has n "
                            "pairs.", *row_notes])
  claims_md = write_table(stem + "_claims.md", "Paper claims on associative recall, decided by "
                          "the verdict rule", CLAIM_COLUMNS, claim_cells, [
                              *claim_notes, "Differences: mean test accuracy of the first row "
                              "minus the second; seeds paired (a t interval over per-seed "
                              "differences) plus a paired bootstrap over test examples. The "
                              "rule: performer/verdicts.py; the claims: "
                              "performer/figures/recall_claims.py."])
  mechanism_md = () if not mechanism_cells else write_table(
      stem + "_mechanism.md", "What FAVOR does on the trained models' own queries and keys",
      MECHANISM_COLUMNS, mechanism_cells, [
          "performer recall-rows on each replicate (experiments/recall_rows.py), means over "
          "seeds, over the first 512 test examples' queries: the row of FAVOR's attention "
          "matrix each query used against exact softmax of the same q and k (L1 distance, "
          "weight on the queried key's value token, largest weight; the attention layer), "
          "and the model's test accuracy through FAVOR's rows and through the exact rows."])
  return (*rows_md, *claims_md, *mechanism_md)


def _split_key(split):
  """test_shuffled first, then test_kv<n> by n."""
  return (split != "test_shuffled", int(split.removeprefix("test_kv")) if split.startswith(
      "test_kv") else 0, split)


def _mean(values):
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


def _median(values):
  values = [v for v in values if v is not None]
  return float(np.median(values)) if values else None


def _draw(left, right, title, rows, means, ceiling=None):
  """Accuracy against state size (left) and against m (right) of one task on one test split;
  the split's no-binding ceiling (`ceilings`) as a dotted line."""
  styles = styles_of(rows)
  favor = sorted((r for r in rows if r.startswith("favor_m")),
                 key=lambda r: int(r.removeprefix("favor_m")))

  def point(ax, x, row, **style):
    mean, acc = means[row]
    if mean is None:
      return
    ax.errorbar([x], [mean], yerr=[[mean - acc.min()], [acc.max() - mean]], capsize=3,
                linestyle="none", **style)

  for ax in (left, right):
    if "identity" in means and means["identity"][0] is not None:
      ax.axhline(means["identity"][0], color="grey", linestyle="--", linewidth=1,
                 label=label("identity"))
    if ceiling:
      ax.axhline(100 * ceiling["ceiling"], color="grey", linestyle=":", linewidth=1,
                 label="no-binding ceiling (rule)")
  if favor:
    xs = [state_size(rows[r][0]) for r in favor]
    ys = [means[r][0] for r in favor]
    for ax, x in ((left, xs), (right, [int(r.removeprefix("favor_m")) for r in favor])):
      ax.plot(x, ys, color="k", marker="o", label="FAVOR+ (positive, ORF, redrawn)")
      for xi, r in zip(x, favor):
        point(ax, xi, r, color="k")
  # Many rows share a state size (m x d_v); spread them a little on the log axis so
  # that each marker and its seed range stays visible.
  at = {"left": {}, "right": {}}
  for row in styles:
    at["left"].setdefault(state_size(rows[row][0]), []).append(row)
    m = _num_features(rows[row][0])
    if m is not None and row != "exact":
      at["right"].setdefault(m, []).append(row)
  for ax, side in ((left, "left"), (right, "right")):
    for x, group in at[side].items():
      for k, row in enumerate(group):
        point(ax, x * DODGE ** (k - (len(group) - 1) / 2), row, label=label(row), **styles[row])
  left.set_xscale("log")
  right.set_xscale("log", base=2)
  left.set_xlabel("attention state per layer (floats: M x d_v, or a KV cache's L x (d_k + d_v))")
  right.set_xlabel("random features m")
  for ax in (left, right):
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
  left.set_title(f"MQAR {title}: accuracy against state size")
  right.set_title(f"MQAR {title}: random-feature rows against m")
  for ax, where in ((left, dict(loc="center left", bbox_to_anchor=(1.0, 0.5))),
                    (right, dict(loc="lower right"))):
    if ax.get_legend_handles_labels()[0]:  # a panel without rows (no random features) has none
      ax.legend(fontsize=7, **where)


def styles_of(rows):
  """{row: matplotlib style} of the rows drawn as markers (not FAVOR+'s m sweep, not identity):
  one colour of tab20 per row of LABELS, fixed whatever rows a figure has."""
  colours = plt.get_cmap("tab20").colors
  names = list(LABELS)
  return {row: {"color": colours[names.index(row) % len(colours)],
                "marker": "sD^v"[names.index(row) % 4]}
          for row in rows if not row.startswith("favor_m") and row != "identity"}


def _num_features(run):
  opts = attention.options(run.attention, run.config["model"].get("attention_options"))
  if "num_features" not in opts or opts.get("features") == "deterministic":
    return None
  return opts["num_features"]
