"""On-disk token shards and the grain data source that reads them.

A split is a folder of shards plus `index.json`. Shard i is two .npy files:
`shard-iiiii.tokens.npy` (all records' token ids back to back, uint8 for
proteins, uint16 for SentencePiece ids) and `shard-iiiii.offsets.npy`
([records + 1] int64 starts). Shards are memory-mapped when read, so many
hosts can read disjoint records of the same files.
"""

import json
import os

import grain.python as grain
import numpy as np

INDEX = "index.json"


class ShardWriter:
  """Appends records to shards of about `shard_tokens` tokens each."""

  def __init__(self, folder, dtype, shard_tokens):
    self.folder, self.dtype, self.shard_tokens = folder, np.dtype(dtype), shard_tokens
    self.shards = []  # [{"name", "records", "tokens"}]
    self._pieces, self._lengths, self._tokens = [], [], 0
    os.makedirs(folder, exist_ok=True)

  def add(self, tokens):
    """Appends one record ([n] integer tokens)."""
    self._pieces.append(np.asarray(tokens, self.dtype))
    self._lengths.append(len(tokens))
    self._tokens += len(tokens)
    if self._tokens >= self.shard_tokens:
      self._flush()

  def _flush(self):
    if not self._lengths:
      return
    name = f"shard-{len(self.shards):05d}"
    tokens = np.concatenate(self._pieces) if self._pieces else np.zeros(0, self.dtype)
    offsets = np.concatenate([[0], np.cumsum(self._lengths, dtype=np.int64)])
    np.save(os.path.join(self.folder, name + ".tokens.npy"), tokens)
    np.save(os.path.join(self.folder, name + ".offsets.npy"), offsets)
    self.shards.append({"name": name, "records": len(self._lengths), "tokens": int(len(tokens))})
    self._pieces, self._lengths, self._tokens = [], [], 0

  def close(self):
    """Writes the last shard and index.json; returns the index dict."""
    self._flush()
    index = {"dtype": self.dtype.name, "records": sum(s["records"] for s in self.shards),
             "tokens": sum(s["tokens"] for s in self.shards), "shards": self.shards}
    with open(os.path.join(self.folder, INDEX), "w") as f:
      json.dump(index, f, indent=1, sort_keys=True)
    return index


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
