"""On-disk token shards: their format and the writer (no grain here: prepare-* start fast).

A split is a folder of shard-NNNNN.tokens.npy and .offsets.npy pairs plus index.json."""

import json
import os

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

  def add_many(self, tokens, lengths):
    """Appends records given back to back: tokens [sum(lengths)], lengths [n]. The same shards
    as `add` of each record in turn (a shard closes after the record that fills it)."""
    lengths = np.asarray(lengths, np.int64)
    tokens = np.asarray(tokens, self.dtype)
    start = 0  # of the records not yet added, in `tokens` and `lengths`
    while start < len(lengths):
      filled = self._tokens + np.cumsum(lengths[start:])
      full = int(np.searchsorted(filled, self.shard_tokens))  # first record that fills a shard
      stop = min(start + full + 1, len(lengths))
      taken = int(lengths[start:stop].sum())
      self._pieces.append(tokens[:taken])
      self._lengths.extend(lengths[start:stop].tolist())
      self._tokens += taken
      tokens, start = tokens[taken:], stop
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
