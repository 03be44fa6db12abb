"""MQAR batches: a generated task's examples served as pipeline.ShardBatches serves shards."""

import numpy as np

from performer.data.mqar import check_memory, example, load, split_task, train_index
from performer.data.stream import StepBatches
from performer.errors import UserError


class Batches(StepBatches):
  """pipeline.ShardBatches' interface for an MQAR folder: batches by step and fixed eval passes.

  A batch is {inputs, targets [B / P, L] int32, ids [B / P] int64, positions
  [B / P, kv] int32}; the training step and eval score the positions only
  (train/steps.py, `scored`).

  Raises:
    UserError: a (B) model, a DataConfig.seq_len other than the task's L,
      an unknown split, or a task too large for this machine (check_memory).
  """

  def __init__(self, cfg, split, *, causal, process_index=0, process_count=1):
    self.task = load(cfg.path)
    check_memory(self.task)
    if not causal:
      raise UserError(f"{cfg.path}: MQAR is next-token recall: train a (U) model "
                      "(ModelConfig.causal = True)")
    if cfg.seq_len != self.task.seq_len:
      raise UserError(f"DataConfig.seq_len {cfg.seq_len} differs from the MQAR task's L = "
                      f"{self.task.seq_len} ({cfg.path}/manifest.json)")
    if split not in self.task.splits:
      raise UserError(f"{cfg.path}: no {split!r} split (it has {', '.join(self.task.splits)})")
    if cfg.batch_size % process_count:
      raise UserError(f"DataConfig.batch_size {cfg.batch_size} is not divisible by the "
                      f"{process_count} processes")
    self.cfg, self.split = cfg, split
    self.rows = cfg.batch_size // process_count
    self.offset = process_index * self.rows
    self.seed = (cfg.seed or 0) if split == "train" else self.task.seed
    self.size = None if split == "train" else self.task.eval_examples

  def _stack(self, ids, examples=None):
    """Examples `ids` stacked; id -1 (eval padding) is a blank row that weighs nothing.
    `examples`: the generator's indices, when they are not the ids (a train pool's order)."""
    kv = split_task(self.task, self.split)[0].num_kv
    blank = (np.zeros(self.task.seq_len, np.int32),) * 2 + (np.zeros(kv, np.int32),)
    rows = [example(self.task, self.seed, self.split, e) if i >= 0 else blank
            for i, e in zip(ids, ids if examples is None else examples)]
    inputs, targets, positions = (np.stack(x) for x in zip(*rows))
    return {"inputs": inputs, "targets": targets, "ids": np.asarray(ids, np.int64),
            "positions": positions}

  def train_batch(self, step):
    """This process's rows of batch `step`: reads step * B + offset + [0, B / P) (train_index)."""
    start = step * self.cfg.batch_size + self.offset
    reads = list(range(start, start + self.rows))
    return self._stack(reads, [train_index(self.task, self.seed, i) for i in reads])

  def _eval_examples(self):
    return self.size if self.size is not None else self.cfg.batch_size  # train: one batch's worth

  def eval_batch_count(self):
    """How many batches `eval_batches` yields: ceil(examples / B)."""
    return -(-self._eval_examples() // self.cfg.batch_size)

  def eval_batches(self):
    """Every example of valid or test once, in order, in batches of B (this process's rows).

    Every process yields ceil(examples / B) batches; rows past the end have id -1.
    """
    size, total = self.cfg.batch_size, self._eval_examples()
    for first in range(0, total, size):
      ids = range(first + self.offset, first + self.offset + self.rows)
      yield self._stack([i if i < total else -1 for i in ids])
