"""The recall study's learning rates, chosen on valid (performer/plans/recall.py's tuning runs).

Zoology reports the best of four rates per model; here each row's rate is
the one of best valid accuracy among its tuning runs, never read on test.
"""

import json
import os

from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import runs as runs_lib
from performer.figures.recall import check_settings, label, task_key
from performer.figures.tables import Column, write_table

LR_COLUMNS = (Column("task"), Column("row"), Column("learning rate", "{:g}"),
              Column("valid accuracy %", "{:.2f}"), Column("chosen"))


def render(run_dirs, out_path):
  """The tuning runs' valid accuracy per row and rate, and the rate chosen for each row (best
  valid accuracy; ties and diverged runs: the smaller rate wins, a diverged run never), to
  out_path (.md), its .csv and .json ({"chosen": {task: {row: rate}}, "valid": ...}).

  Raises:
    UserError: a run without a valid eval or recall settings; a bad out_path.
  """
  loaded = runs_lib.load_runs(run_dirs)
  found = {}
  for run in loaded:
    task, row, lr = (run.settings.get(k) for k in ("task", "row", "lr"))
    if not task or not row or lr is None:
      raise UserError(f"{run.path}: not a recall tuning run (no task, row and lr settings)")
    check_settings(run.path, task, row)
    path = os.path.join(run.path, "eval_valid.json")
    if not os.path.isfile(path):
      raise UserError(f"{run.path}: no eval_valid.json (run performer eval --split valid)")
    with open(path) as f:
      result = json.load(f)
    acc = None if result.get("diverged") else result.get("accuracy")
    found.setdefault(task, {}).setdefault(row, {})[lr] = acc
  chosen, cells = {}, []
  for task in sorted(found, key=task_key):
    chosen[task] = {}
    for row, by_lr in found[task].items():
      ok = {lr: a for lr, a in by_lr.items() if a is not None}
      best = min(ok, key=lambda lr: (-ok[lr], lr)) if ok else min(by_lr)
      chosen[task][row] = best
      cells += [[task, label(row), lr, None if a is None else 100 * a, "yes" if lr == best else ""]
                for lr, a in sorted(by_lr.items())]
  written = write_table(out_path, "Associative recall: learning rates chosen on valid",
                        LR_COLUMNS, cells, ["One run per row and rate (seed "
                        "performer/plans/recall.py TUNE_SEED), evaluated on the valid split, "
                        "never on test; the best valid accuracy wins, ties to the smaller rate."])
  json_path = os.path.splitext(out_path)[0] + ".json"
  with atomic_path(json_path) as tmp, open(tmp, "w") as f:
    json.dump({"chosen": chosen, "valid": found}, f, indent=1, default=str)
  return (*written, json_path)
