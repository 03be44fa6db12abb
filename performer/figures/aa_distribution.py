"""Fig. 9 (App. C.2): the empirical amino-acid distribution of the training split, by class.

From the residue counts in stats.json (or the train shards of a dataset prepared without them)."""

import glob
import os

import matplotlib.pyplot as plt
import numpy as np

from performer.data import vocab
from performer.errors import UserError
from performer.figures.io import check_figure_path, figure_format, save_figure
from performer.figures.table1 import load_stats

NAME = "aa-distribution"  # performer figure NAME
SUMMARY = "Fig. 9 amino-acid frequencies of the training split (--input dataset folder)"
INPUT = "runs/data/trembl-sample"  # prepare-trembl --sample writes it (trembl.SAMPLE_OUT)

# The usual biochemical classes of the 20 standard amino acids (by side chain), for colour.
CLASSES = {"aliphatic": "AGILPV", "aromatic": "FWY", "sulfur": "CM", "hydroxyl": "ST",
           "basic": "HKR", "acidic and amide": "DENQ"}
COLOURS = dict(zip(CLASSES, ("C0", "C1", "C8", "C2", "C3", "C4")))


def counted(folder, split="train"):
  """{residue: count} of a prepared dataset's single-task `split` shards ({} without them): the
  counts a stats.json written before `residue_counts` lacks."""
  letters = np.zeros(vocab.VOCAB_SIZE, np.int64)
  for path in sorted(glob.glob(os.path.join(folder, "single", split, "shard-*.tokens.npy"))):
    letters += np.bincount(np.load(path, mmap_mode="r"), minlength=vocab.VOCAB_SIZE)
  return {t: int(n) for t, n in zip(vocab.TOKENS, letters) if t in vocab.AMINO_ACIDS and n}


def frequencies(stats, split="train", counts=None):
  """{residue: share of every residue of `split`}, over all 25 letters (the 20 standard and
  the 5 anomalous ones, App. C.2), from prepare-trembl's `residue_counts` (or `counts`).

  Raises:
    UserError: no counts for the split (stats written before residue counts, and no shards).
  """
  counts = counts or (stats.get("residue_counts") or {}).get(split)
  if not counts:
    raise UserError(f"no residue counts for the {split} split: this stats.json was written "
                    "before they were recorded and no shards are beside it (run prepare-trembl "
                    "again with --force, or give the dataset folder)")
  total = sum(counts.values())
  return {r: counts.get(r, 0) / total for r in vocab.AMINO_ACIDS}


def render(input_path, out_path):
  """Reads DATASET/stats.json and draws the 20 standard amino acids' shares of the training
  split's residues (in %), grouped and coloured by class; the anomalous letters' total share in
  the title.

  Returns:
    out_path.

  Raises:
    UserError: an unknown image format or unwritable out_path; no stats.json, or one without
      residue counts and no shards beside it.
  """
  figure_format(out_path)
  path, stats = load_stats(input_path)
  own = stats.get("residue_counts") or not os.path.isdir(input_path)
  shares = frequencies(stats, counts=None if own else counted(input_path))
  check_figure_path(out_path)
  order = [(r, c) for c, letters in CLASSES.items() for r in letters]
  fig, ax = plt.subplots(figsize=(9, 4), layout="constrained")
  bars = ax.bar(range(len(order)), [100 * shares[r] for r, _ in order],
                color=[COLOURS[c] for _, c in order])
  ax.set_xticks(range(len(order)), [r for r, _ in order])
  ax.set_ylabel("share of the training residues (%)")
  for name, colour in COLOURS.items():
    ax.bar(0, 0, color=colour, label=name)  # legend entries only
  ax.legend(fontsize=8, ncol=3)
  ax.bar_label(bars, fmt="%.1f", fontsize=7)
  anomalous = 100 * sum(shares[r] for r in vocab.ANOMALOUS)
  clipped = stats.get("single_clipped_to", "?")
  ax.set_title(f"Fig. 9: amino acids of the training split (sequences clipped to L = {clipped}); "
               f"the anomalous {', '.join(vocab.ANOMALOUS)}: {anomalous:.2f}% together\n{path}",
               fontsize=9)
  save_figure(fig, out_path)
  plt.close(fig)
  return out_path
