"""The recall study's learning rates, chosen on valid (performer/plans/recall.py's tuning runs).

Each row's rate is the one of best valid accuracy among its tuning runs, never read on test."""

import json
import os

from performer.atomic import atomic_path
from performer.errors import UserError
from performer.figures import runs as runs_lib
from performer.figures.recall import check_settings, label, task_key
from performer.figures.tables import Column, write_table

NAME = "recall-lr"  # performer figure NAME
SUMMARY = "the recall study's learning rates chosen on valid (--runs)"
READS = "runs"  # render(run folders, out)
OUT = "recall_lr.md"  # in the first run's parent folder
TABLE = True

LR_COLUMNS = (Column("task"), Column("row"), Column("learning rate", "{:g}"),
              Column("valid accuracy %", "{:.2f}"), Column("stopped early at step"),
              Column("chosen"))


def _stopped_at(path):
  try:
    with open(os.path.join(path, "stopped_early.json")) as f:
      return int(json.load(f)["step"])
  except (OSError, ValueError, KeyError, TypeError):
    return None


def render(run_dirs, out_path):
  """The tuning runs' valid accuracy per row and rate, and the rate chosen for each row (the
  earliest early stop, else the best valid accuracy; ties and diverged runs: the smaller rate
  wins, a diverged run never), to
  out_path (.md), its .csv and .json ({"chosen": {task: {row: rate}}, "valid": ...}).

  Raises:
    UserError: a run without a valid eval or recall settings; a bad out_path.
  """
  loaded = runs_lib.load_runs(run_dirs)
  found, stops = {}, {}
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
    stops.setdefault(task, {}).setdefault(row, {})[lr] = _stopped_at(run.path)
  chosen, cells = {}, []
  for task in sorted(found, key=task_key):
    chosen[task] = {}
    for row, by_lr in found[task].items():
      stopped = stops[task][row]
      ok = {lr: a for lr, a in by_lr.items() if a is not None}
      # Best: stopped early, and first; else the best accuracy; ties to the smaller rate.
      rank = lambda lr: ((0, stopped[lr]) if stopped[lr] is not None else (1, -ok[lr]), lr)
      best = min(ok, key=rank) if ok else min(by_lr)
      chosen[task][row] = best
      cells += [[task, label(row), lr, None if a is None else 100 * a, stopped[lr] or "-",
                 "yes" if lr == best else ""] for lr, a in sorted(by_lr.items())]
  written = write_table(out_path, "Associative recall: learning rates chosen on valid",
                        LR_COLUMNS, cells, ["One run per row (or row family) and rate (seed "
                        "performer/plans/recall.py TUNE_SEED), evaluated on the valid split, "
                        "never on test; a run that stopped early (its valid accuracy reached "
                        "the target) beats one that did not, the earliest stop first; else the "
                        "best valid accuracy wins; ties to the smaller rate."])
  json_path = os.path.splitext(out_path)[0] + ".json"
  with atomic_path(json_path) as tmp, open(tmp, "w") as f:
    json.dump({"chosen": chosen, "valid": found, "stopped_early_at": stops}, f, indent=1,
              default=str)
  return (*written, json_path)
