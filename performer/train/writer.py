"""One metric writer: TensorBoard event files and metrics.jsonl in the workdir (process 0)."""

import json
import os

import jax
from tensorboardX import SummaryWriter


class MetricWriter:
  """write(step, {name: value}, prefix) -> a TensorBoard scalar and a JSON line per call."""

  def __init__(self, workdir):
    self.enabled = jax.process_index() == 0
    if self.enabled:
      self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
      self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")  # pylint: disable=consider-using-with

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
