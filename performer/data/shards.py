"""The grain data sources that read token shards (their format: shard_writer.py).

Shards are memory-mapped, so many hosts can read disjoint records of the same files."""

import json
import os

import grain.python as grain
import numpy as np

from performer.data.shard_writer import INDEX


class TokenShards(grain.RandomAccessDataSource):
  """grain data source over a split folder: record i -> [n] token ids (a copy)."""

  def __init__(self, folder):
    with open(os.path.join(folder, INDEX)) as f:
      self.index = json.load(f)
    self.folder = folder
    counts = [s["records"] for s in self.index["shards"]]
    self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    self._arrays = {}  # shard number -> (tokens, offsets), memory-mapped on first use

  def __len__(self):
    return int(self._starts[-1])

  def _shard(self, number):
    if number not in self._arrays:
      base = os.path.join(self.folder, self.index["shards"][number]["name"])
      self._arrays[number] = (np.load(base + ".tokens.npy", mmap_mode="r"),
                              np.load(base + ".offsets.npy", mmap_mode="r"))
    return self._arrays[number]

  def __getitem__(self, record):
    record = int(record)
    if not 0 <= record < len(self):
      raise IndexError(f"record {record} out of range [0, {len(self)})")
    number = int(np.searchsorted(self._starts, record, side="right")) - 1
    tokens, offsets = self._shard(number)
    local = record - self._starts[number]
    return np.array(tokens[offsets[local]:offsets[local + 1]])

  def lengths(self):
    """[records] int64 record lengths, from the offsets alone."""
    return np.concatenate([np.diff(self._shard(i)[1]) for i in range(len(self.index["shards"]))]
                          or [np.zeros(0, np.int64)])

  def __repr__(self):
    return f"TokenShards({self.folder!r}, records={len(self)})"


class Windows(grain.RandomAccessDataSource):
  """Each record of `source` cut into non-overlapping windows of `length` tokens.

  For long records (PG-19 books, concatenated TrEMBL chunks): window i is
  tokens [j * length, (j + 1) * length) of its record; a record's last window
  may be shorter.
  """

  def __init__(self, source, length):
    self.source, self.length = source, length
    counts = np.maximum(1, -(-source.lengths() // length))
    self._ends = np.cumsum(counts)  # window index -> record by searchsorted

  def __len__(self):
    return int(self._ends[-1]) if len(self._ends) else 0

  def __getitem__(self, window):
    window = int(window)
    if not 0 <= window < len(self):
      raise IndexError(f"window {window} out of range [0, {len(self)})")
    record = int(np.searchsorted(self._ends, window, side="right"))
    first = self._ends[record - 1] if record else 0
    start = (window - first) * self.length
    return self.source[record][start:start + self.length]
