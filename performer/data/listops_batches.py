"""ListOps batches: a prepared ListOps folder served as pipeline.ShardBatches serves shards."""

import os

import grain.python as grain
import numpy as np

from performer.data import listops
from performer.data.shards import TokenShards
from performer.data.stream import StepBatches
from performer.errors import UserError


class Batches(StepBatches):
  """pipeline.ShardBatches' interface for sequence classification: a batch is {inputs [B / P, L]
  int32 (CLS, the expression, padding), labels [B / P] int32, ids [B / P] int64}; the training
  step and eval score the label only (train/steps.py).

  Raises:
    UserError: a (U) model, a DataConfig.seq_len shorter than the split's longest example
      (listops.ListOpsConfig.max_length), an unknown split, or a batch size not divisible by the
      processes.
  """

  def __init__(self, cfg, split, *, causal, process_index=0, process_count=1):
    task = listops.load(cfg.path)
    if causal:
      raise UserError(f"{cfg.path}: ListOps is sequence classification: train a (B) model with "
                      "a pooled classifier (ModelConfig.causal = False, ModelConfig.pooling)")
    if cfg.seq_len < task.max_length:
      raise UserError(f"DataConfig.seq_len {cfg.seq_len} is shorter than the ListOps task's "
                      f"examples (up to {task.max_length - 1} tokens plus CLS, "
                      f"{cfg.path}/manifest.json): set it to >= {task.max_length}")
    if split not in listops.SPLITS:
      raise UserError(f"{cfg.path}: no {split!r} split (it has {', '.join(listops.SPLITS)})")
    if cfg.batch_size % process_count:
      raise UserError(f"DataConfig.batch_size {cfg.batch_size} is not divisible by the "
                      f"{process_count} processes")
    self.cfg = cfg
    self.rows = cfg.batch_size // process_count
    self.offset = process_index * self.rows
    self.source = TokenShards(os.path.join(cfg.path, split))
    self.labels = np.load(os.path.join(cfg.path, split, "labels.npy"))
    # A config built outside a run without a seed shuffles as seed 0, as ShardBatches.
    self.order = grain.MapDataset.range(len(self.source)).shuffle(seed=cfg.seed or 0).repeat()

  def _stack(self, records, ids):
    """Examples `records` (indices into the split, -1: a blank row that weighs nothing)."""
    inputs = np.full((len(records), self.cfg.seq_len), listops.PAD, np.int32)
    labels = np.zeros(len(records), np.int32)
    for row, record in enumerate(records):
      if record >= 0:
        tokens = self.source[record]
        inputs[row, :len(tokens)] = tokens
        labels[row] = self.labels[record]
    return {"inputs": inputs, "labels": labels, "ids": np.asarray(ids, np.int64)}

  def train_batch(self, step):
    """This process's rows of batch `step`: the shuffled stream's step * B + offset + [0, B / P)."""
    start = step * self.cfg.batch_size + self.offset
    ids = range(start, start + self.rows)
    return self._stack([self.order[i] for i in ids], ids)

  def eval_batch_count(self):
    """How many batches `eval_batches` yields: ceil(examples / B)."""
    return -(-len(self.source) // self.cfg.batch_size)

  def eval_batches(self):
    """Every example of the split once, in order, in batches of B (this process's rows); rows
    past the end have id -1."""
    total = len(self.source)
    for first in range(0, total, self.cfg.batch_size):
      ids = [i if i < total else -1 for i in range(first + self.offset,
                                                   first + self.offset + self.rows)]
      yield self._stack(ids, ids)
