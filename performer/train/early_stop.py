"""Stopping a run once its validation accuracy reaches TrainConfig.stop_accuracy (Zoology: 99%).

A run stopped at step s is the one an uninterrupted run would have been at s."""

import json
import os

from performer.atomic import atomic_path

STOPPED = "stopped_early.json"


def reached(train, valid):
  """Whether validation metrics `valid` stop a run of TrainConfig `train`."""
  return bool(train.stop_accuracy) and valid.get("accuracy", 0.0) >= train.stop_accuracy


def record(workdir, step, valid, threshold):
  """Writes <workdir>/stopped_early.json: the step and the accuracy that stopped the run."""
  with atomic_path(os.path.join(workdir, STOPPED)) as tmp, open(tmp, "w") as f:
    json.dump({"step": step, "valid_accuracy": float(valid["accuracy"]),
               "stop_accuracy": threshold}, f, indent=1)


def stopped_at(workdir):
  """The step a run stopped early at (its record), or None."""
  try:
    with open(os.path.join(workdir, STOPPED)) as f:
      return int(json.load(f)["step"])
  except FileNotFoundError:
    return None
