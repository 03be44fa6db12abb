"""One metric writer: TensorBoard event files and metrics.jsonl in the workdir (process 0)."""

import json
import os

import jax
from tensorboardX import SummaryWriter

from performer.atomic import atomic_path


class MetricWriter:
  """write(step, {name: value}, prefix) -> a TensorBoard scalar and a JSON line per call.

  A run resumed at step `start` first drops the metrics.jsonl rows past it:
  the killed run logged them after its last checkpoint, and the resumed run
  logs those steps again. TensorBoard keeps every event file; the new one
  starts with purge_step=start, so TensorBoard hides the killed run's events
  from `start` on instead of drawing both.
  """

  def __init__(self, workdir, *, start=0):
    self.enabled = jax.process_index() == 0
    if self.enabled:
      path = os.path.join(workdir, "metrics.jsonl")
      if os.path.exists(path):
        _drop_rows_after(path, start)
      self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=start or None)
      self.jsonl = open(path, "a")  # pylint: disable=consider-using-with

  def write(self, step, values, prefix):
    if not self.enabled:
      return
    for name, value in values.items():
      self.tb.add_scalar(f"{prefix}/{name}", value, step)
    self.jsonl.write(json.dumps({"step": step, "split": prefix, **values}) + "\n")
    self.jsonl.flush()
    self.tb.flush()

  def close(self):
    if self.enabled:
      self.tb.close()
      self.jsonl.close()


def _drop_rows_after(path, step):
  """Rewrites metrics.jsonl without rows past `step` (and a line cut short by a kill)."""
  kept = []
  with open(path) as f:
    for line in f:
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        continue
      if row["step"] <= step:
        kept.append(line)
  with atomic_path(path) as tmp, open(tmp, "w") as f:
    f.writelines(kept)
