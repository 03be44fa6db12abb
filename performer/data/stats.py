"""Length statistics in the form of the paper's Table 1, in constant memory.

A histogram of lengths (one entry per distinct length) gives the exact median."""

import collections
import math

import numpy as np

FIELDS = ("count", "min", "max", "mean", "std", "median")


class LengthStats:
  """Accumulates lengths; `summary()` gives count, min, max, mean, std, median."""

  def __init__(self):
    self.histogram = collections.Counter()

  def add(self, length, times=1):
    self.histogram[int(length)] += times

  def add_many(self, lengths):
    """Adds every length of an integer array."""
    values, counts = np.unique(np.asarray(lengths), return_counts=True)
    self.histogram.update(dict(zip(values.tolist(), counts.tolist())))

  def summary(self):
    """Dict of FIELDS; std is the population standard deviation; {} when empty."""
    count = sum(self.histogram.values())
    if not count:
      return {"count": 0}
    total = sum(n * c for n, c in self.histogram.items())
    mean = total / count
    var = sum(c * (n - mean) ** 2 for n, c in self.histogram.items()) / count
    return {"count": count, "min": min(self.histogram), "max": max(self.histogram),
            "mean": round(mean, 2), "std": round(math.sqrt(var), 2),
            "median": _median(self.histogram, count)}


def _median(histogram, count):
  """Median from a histogram (mean of the two middle values for even counts)."""
  middle = [(count - 1) // 2, count // 2]
  values, seen = [], 0
  for length in sorted(histogram):
    seen += histogram[length]
    while middle and middle[0] < seen:
      values.append(length)
      middle.pop(0)
  return (values[0] + values[1]) / 2


def markdown_table(rows, title):
  """rows: {split: summary dict} -> a Markdown table like the paper's Table 1."""
  lines = [f"### {title}", "", "| split | " + " | ".join(FIELDS) + " |",
           "| --- |" + " --- |" * len(FIELDS)]
  for split, summary in rows.items():
    cells = [str(summary.get(field, "")) for field in FIELDS]
    lines.append(f"| {split} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"
