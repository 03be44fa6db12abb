"""Batches for training and evaluation from prepared token shards (grain).

A training batch is a pure function of (seed, step): resuming needs only the step."""

import dataclasses
import json
import os

import grain.python as grain
import numpy as np

from performer.data import listops, listops_batches, mqar, mqar_batches, vocab
from performer.data.masking import MLM
from performer.data.shards import TokenShards, Windows
from performer.data.stream import StepBatches
from performer.errors import UserError


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Which prepared dataset to read, how to batch it and, for (B), how to corrupt it.

  mlm_rate is the share of real positions the masked LM is scored on; of
  those, mlm_mask become the mask token, mlm_random a random token, and the
  rest stay unchanged (App. A.1: 15%, 80/10/10).

  Raises:
    ValueError (when built): a size below 1 or proportions out of range.
  """
  path: str = "runs/data/trembl-sample"
  task: str = "single"  # TrEMBL: single or concat; PG-19 datasets have one task
  seq_len: int = 1024
  batch_size: int = 8
  seed: int | None = None  # the order of train examples; None: the run's TrainConfig.seed
  mlm_rate: float = 0.15
  mlm_mask: float = 0.8
  mlm_random: float = 0.1

  def __post_init__(self):
    if not self.path:
      raise ValueError("DataConfig.path is empty: give a prepared dataset folder")
    for name in ("seq_len", "batch_size"):
      if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
        raise ValueError(f"DataConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}")
    if not 0 < self.mlm_rate <= 1:
      raise ValueError(f"DataConfig.mlm_rate must be in (0, 1], got {self.mlm_rate!r}")
    if not (0 <= self.mlm_mask <= 1 and 0 <= self.mlm_random <= 1
            and self.mlm_mask + self.mlm_random <= 1):
      raise ValueError(f"DataConfig.mlm_mask and mlm_random must be >= 0 with a sum <= 1, got "
                       f"{self.mlm_mask!r} and {self.mlm_random!r}")

  @property
  def mlm(self):
    """The corruption proportions as masking.MLM (hashable: a static jit argument)."""
    return MLM(rate=self.mlm_rate, mask=self.mlm_mask, random=self.mlm_random)


def _manifest(cfg):
  """The dataset's manifest.json; UserError when cfg.path holds no prepared dataset."""
  try:
    with open(os.path.join(cfg.path, "manifest.json")) as f:
      return json.load(f)
  except (FileNotFoundError, NotADirectoryError):
    raise UserError(f"{cfg.path}: no prepared dataset (run performer prepare-trembl, "
                    "prepare-pg19, prepare-mqar or prepare-listops first)") from None


def _kind(cfg):
  """'trembl', 'pg19', 'mqar' or 'listops'."""
  return _manifest(cfg)["fingerprint"]["kind"]


def check_model(cfg, model):
  """Raises UserError when ModelConfig `model` cannot learn the dataset at cfg.path: ListOps
  needs a pooled (B) classifier of its classes, a language-modelling dataset no pooling."""
  if _kind(cfg) == listops.KIND:
    if not model.pooling or model.num_classes != listops.NUM_CLASSES:
      raise UserError(f"{cfg.path} is ListOps, {listops.NUM_CLASSES}-class classification: set "
                      f"ModelConfig.pooling ('mean' or 'cls'), num_classes = "
                      f"{listops.NUM_CLASSES} and causal = False (gin/listops/base.gin)")
  elif model.pooling:
    raise UserError(f"ModelConfig.pooling makes a classifier, but {cfg.path} is a "
                    "language-modelling dataset: remove pooling and num_classes")


def split_folder(cfg, split):
  """The shard folder of `split` (train, valid, test, ood) of the dataset at cfg.path.

  Raises:
    UserError: no prepared dataset there, an unknown task, or no such split.
  """
  manifest = _manifest(cfg)
  tasks = manifest.get("tasks", ["single"])  # PG-19: one task, read as windows of seq_len
  if cfg.task not in tasks:
    raise UserError(f"unknown DataConfig.task {cfg.task!r}: the dataset at {cfg.path} has "
                    f"{', '.join(repr(t) for t in tasks)}")
  kind = manifest["fingerprint"]["kind"]
  folder = os.path.join(cfg.path, cfg.task, split) if kind == "trembl" else os.path.join(cfg.path, split)
  if split not in manifest["splits"] or not os.path.isdir(folder):
    raise UserError(f"{cfg.path}: no {split!r} split (it has {', '.join(manifest['splits'])})")
  return folder


def multiplier(cfg, split):
  """Word-level log-likelihood multiplier of `split` for PG-19 (App. A.1.1); None for other data.

  exp(multiplier * per-token loss) is the word-level perplexity.
  """
  if _kind(cfg) != "pg19":
    return None
  with open(os.path.join(cfg.path, "stats.json")) as f:
    return json.load(f)["splits"][split]["multiplier"]


def vocab_ids(cfg):
  """The dataset's vocabulary as vocab.Ids (size, pad, eos, mask, first_regular)."""
  if _kind(cfg) == "trembl":
    return vocab.PROTEIN_IDS
  if _kind(cfg) == mqar.KIND:
    return mqar.ids(mqar.load(cfg.path))
  if _kind(cfg) == listops.KIND:
    return listops.IDS
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  sp = spm.SentencePieceProcessor(model_file=os.path.join(cfg.path, "spm.model"))
  # SentencePiece: 0 <unk>, 1 <s>, 2 </s>; no pad or mask piece, so two ids are added.
  size = sp.get_piece_size()
  return vocab.Ids(size=size + 2, pad=size, eos=sp.eos_id(), mask=size + 1, first_regular=3)


def _example(tokens, seq_len, eos, pad, causal):
  """One record -> (inputs [seq_len], targets [seq_len]) int32, padded."""
  seq = np.asarray(tokens, np.int32)[:seq_len]
  inputs = np.full(seq_len, pad, np.int32)
  targets = np.full(seq_len, pad, np.int32)
  if causal:
    target = np.concatenate([seq, [eos]])[:seq_len]
    inputs[:len(target)] = np.concatenate([[eos], target[:-1]])
    targets[:len(target)] = target
  else:
    inputs[:len(seq)] = seq
    targets[:len(seq)] = seq
  return inputs, targets


def batches(cfg, split, *, causal, process_index=0, process_count=1):
  """The batches of `split` of the dataset at cfg.path: `ShardBatches`, mqar_batches.Batches
  for a generated MQAR task or listops_batches.Batches for ListOps (same interface).

  Raises:
    UserError: no prepared dataset there, no such split, or a batch size not
      divisible by the processes.
  """
  cls = {mqar.KIND: mqar_batches.Batches,
         listops.KIND: listops_batches.Batches}.get(_kind(cfg), ShardBatches)
  return cls(cfg, split, causal=causal, process_index=process_index, process_count=process_count)


class ShardBatches(StepBatches):
  """Training batches by step, and one ordered pass over a split for evaluation.

  DataConfig.batch_size is the global batch B, as in the paper; each of the
  P processes builds only its own B / P rows (its slice of the data axis),
  so a batch is the same however many processes share it.
  """

  def __init__(self, cfg, split, *, causal, process_index=0, process_count=1):
    if cfg.batch_size % process_count:
      raise UserError(f"DataConfig.batch_size {cfg.batch_size} is not divisible by the "
                      f"{process_count} processes")
    self.cfg, self.causal = cfg, causal
    self.rows = cfg.batch_size // process_count  # this process's rows of each batch
    self.offset = process_index * self.rows
    self.source = TokenShards(split_folder(cfg, split))
    if cfg.task != "single" or _kind(cfg) != "trembl":
      self.source = Windows(self.source, cfg.seq_len)
    if not len(self.source):
      raise UserError(f"{cfg.path}: the {split!r} split is empty")
    ids = vocab_ids(cfg)
    self.pad, self.eos = ids.pad, ids.eos
    # A config built outside a run (tests, tools) without a seed shuffles as seed 0.
    self.stream = grain.MapDataset.source(self.source).shuffle(seed=cfg.seed or 0).repeat()

  def _stack(self, records, ids):
    pairs = [_example(r, self.cfg.seq_len, self.eos, self.pad, self.causal) for r in records]
    inputs, targets = (np.stack(x) for x in zip(*pairs))
    return {"inputs": inputs, "targets": targets, "ids": np.asarray(ids, np.int64)}

  def train_batch(self, step):
    """This process's rows of batch `step`: inputs, targets [B / P, L] int32 and ids [B / P].

    Rows are the flat stream indices step * B + offset + [0, B / P).
    """
    start = step * self.cfg.batch_size + self.offset
    ids = range(start, start + self.rows)
    return self._stack([self.stream[i] for i in ids], ids)

  def eval_batch_count(self):
    """How many batches `eval_batches` yields: ceil(examples / B)."""
    return -(-len(self.source) // self.cfg.batch_size)

  def eval_batches(self):
    """Every example of the split once, in order, in batches of B (this process's rows).

    Every process yields the same number of batches, ceil(examples / B): rows
    past the end are empty examples (all pad, id -1) that carry no weight.
    """
    size, total = self.cfg.batch_size, len(self.source)
    for start in range(0, total, size):
      ids = [i for i in range(start + self.offset, start + self.offset + self.rows) if i < total]
      records = [self.source[i] for i in ids] + [np.zeros(0, np.int32)] * (self.rows - len(ids))
      yield self._stack(records, ids + [-1] * (self.rows - len(ids)))
