"""Stopping a run early: at TrainConfig.stop_accuracy valid accuracy (Zoology: 99%) or a plateau.

A run stopped at step s is the one an uninterrupted run would have been at s."""

import json
import os

from performer.atomic import atomic_path

STOPPED = "stopped_early.json"


def reached(train, valid):
  """Whether validation metrics `valid` stop a run of TrainConfig `train`."""
  return bool(train.stop_accuracy) and valid.get("accuracy", 0.0) >= train.stop_accuracy


def plateaued(train, history):
  """Whether validation accuracies `history` (every eval of the run so far, in step order) stop
  a run of TrainConfig `train`: stop_patience evals have passed since the best one, where an eval
  is the best when it beats every earlier one by more than stop_min_delta."""
  if not train.stop_patience or not history:
    return False
  best = 0
  for i, accuracy in enumerate(history):
    if accuracy > history[best] + train.stop_min_delta:
      best = i
  return len(history) - 1 - best >= train.stop_patience


def history(workdir, start):
  """The validation accuracies metrics.jsonl holds for steps <= `start` (a resumed run's evals
  so far), in step order; [] without the file."""
  try:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      rows = [json.loads(line) for line in f if line.strip()]
  except FileNotFoundError:
    return []
  except ValueError:  # a line cut short by a kill: the writer drops it on resume
    return []
  return [r["accuracy"] for r in sorted(rows, key=lambda r: r["step"])
          if r.get("split") == "valid" and r["step"] <= start and "accuracy" in r]


def record(workdir, step, valid, train, rule):
  """Writes <workdir>/stopped_early.json: the step, the accuracy and the rule that stopped the
  run ("accuracy" or "plateau")."""
  with atomic_path(os.path.join(workdir, STOPPED)) as tmp, open(tmp, "w") as f:
    json.dump({"step": step, "valid_accuracy": float(valid["accuracy"]), "rule": rule,
               "stop_accuracy": train.stop_accuracy, "stop_patience": train.stop_patience,
               "stop_min_delta": train.stop_min_delta}, f, indent=1)


def stopped_at(workdir):
  """The step a run stopped early at (its record), or None."""
  try:
    with open(os.path.join(workdir, STOPPED)) as f:
      return int(json.load(f)["step"])
  except FileNotFoundError:
    return None
